package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Files Checksum writes into the release directory.
const (
	// SumsFile holds `<sha256>  <path>` for every file of the release directory but the OCI
	// layouts' blobs, in the format `sha256sum -c` reads.
	SumsFile = "SHA256SUMS"
	// ImagesFile holds `<name> <digest>` for every OCI layout: the digest of its tagged image
	// index, which names every blob under it (manifests, configs, layers, SBOMs).
	ImagesFile = "images.txt"
)

// refNameAnnotation tags the image index of a layout written by `imagebuild index`.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// Artifact is a file of a release directory.
type Artifact struct {
	// Path is relative to the release directory, with / separators.
	Path   string
	Size   int64
	SHA256 string
}

// Image is an OCI layout of a release directory.
type Image struct {
	// Name is the layout directory's name (the image's name in the registry); Tag its index's tag.
	Name, Tag string
	// Digest is the tagged image index's.
	Digest v1.Hash
	// LayoutSize is the size of every file of the layout (each blob once: images and SBOMs).
	LayoutSize int64
	// Platforms are the index's images in its order.
	Platforms []ImagePlatform
}

// ImagePlatform is one platform's image of an index.
type ImagePlatform struct {
	// Platform is os/arch.
	Platform string
	// Size is what a node pulls: the compressed layers and the config (not the manifest).
	Size int64
}

// Listing is what Checksum found in a release directory.
type Listing struct {
	// Dir is the release directory.
	Dir string
	// Artifacts are the files SumsFile lists, sorted by path, then SumsFile itself.
	Artifacts []Artifact
	// Images are the OCI layouts, sorted by name.
	Images []Image
}

// Checksum writes dir/ImagesFile, then dir/SumsFile over every file under dir except the blobs of
// the OCI layouts (a directory holding an oci-layout file, whose blobs ImagesFile names by the
// index digest), the image builder's records of inputs (*.inputs), unfinished files (*.tmp) and
// SumsFile itself. It returns what it listed.
func Checksum(dir string) (Listing, error) {
	l := Listing{Dir: dir}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if !fileExists(filepath.Join(p, "oci-layout")) {
			return nil
		}
		img, err := readImage(p)
		if err != nil {
			return err
		}
		l.Images = append(l.Images, img)
		return filepath.SkipDir
	})
	if err != nil {
		return Listing{}, fmt.Errorf("checksum %s: %w", dir, err)
	}
	var images strings.Builder
	for _, img := range l.Images {
		fmt.Fprintf(&images, "%s %s\n", img.Name, img.Digest)
	}
	if err := os.WriteFile(filepath.Join(dir, ImagesFile), []byte(images.String()), 0o644); err != nil {
		return Listing{}, fmt.Errorf("checksum %s: %w", dir, err)
	}

	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == "blobs" && fileExists(filepath.Join(filepath.Dir(p), "oci-layout")) {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == SumsFile || strings.HasSuffix(rel, ".inputs") || strings.HasSuffix(rel, ".tmp") || !d.Type().IsRegular() {
			return nil
		}
		a, err := hashFile(p)
		if err != nil {
			return err
		}
		a.Path = rel
		l.Artifacts = append(l.Artifacts, a)
		return nil
	})
	if err != nil {
		return Listing{}, fmt.Errorf("checksum %s: %w", dir, err)
	}
	slices.SortFunc(l.Artifacts, func(a, b Artifact) int { return strings.Compare(a.Path, b.Path) })
	var sums strings.Builder
	for _, a := range l.Artifacts {
		fmt.Fprintf(&sums, "%s  %s\n", a.SHA256, a.Path)
	}
	w, err := writeAtomic(filepath.Join(dir, SumsFile), func(w io.Writer) error {
		_, err := io.WriteString(w, sums.String())
		return err
	})
	if err != nil {
		return Listing{}, err
	}
	l.Artifacts = append(l.Artifacts, Artifact{Path: SumsFile, Size: w.Size, SHA256: w.SHA256})
	return l, nil
}

// readImage reads the layout at dir: its one tagged image index and each platform's size.
func readImage(dir string) (Image, error) {
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return Image{}, fmt.Errorf("read layout %s: %w", dir, err)
	}
	rm, err := root.IndexManifest()
	if err != nil {
		return Image{}, fmt.Errorf("read layout %s: %w", dir, err)
	}
	img := Image{Name: filepath.Base(dir)}
	var idx v1.ImageIndex
	for _, d := range rm.Manifests {
		if !d.MediaType.IsIndex() || d.Annotations[refNameAnnotation] == "" {
			continue
		}
		if idx != nil {
			return Image{}, fmt.Errorf("read layout %s: more than one tagged image index", dir)
		}
		if idx, err = root.ImageIndex(d.Digest); err != nil {
			return Image{}, fmt.Errorf("read layout %s: %w", dir, err)
		}
		img.Tag, img.Digest = d.Annotations[refNameAnnotation], d.Digest
	}
	if idx == nil {
		return Image{}, fmt.Errorf("read layout %s: no image index tagged with %s", dir, refNameAnnotation)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return Image{}, fmt.Errorf("read layout %s: %w", dir, err)
	}
	for _, d := range im.Manifests {
		if d.Platform == nil || !d.MediaType.IsImage() {
			continue
		}
		pi, err := idx.Image(d.Digest)
		if err != nil {
			return Image{}, fmt.Errorf("read layout %s: %w", dir, err)
		}
		m, err := pi.Manifest()
		if err != nil {
			return Image{}, fmt.Errorf("read layout %s: %w", dir, err)
		}
		p := ImagePlatform{Platform: path.Join(d.Platform.OS, d.Platform.Architecture, d.Platform.Variant), Size: m.Config.Size}
		for _, layer := range m.Layers {
			p.Size += layer.Size
		}
		img.Platforms = append(img.Platforms, p)
	}
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		img.LayoutSize += info.Size()
		return nil
	})
	if err != nil {
		return Image{}, fmt.Errorf("read layout %s: %w", dir, err)
	}
	return img, nil
}

func hashFile(p string) (Artifact, error) {
	f, err := os.Open(p)
	if err != nil {
		return Artifact{}, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Artifact{}, fmt.Errorf("read %s: %w", p, err)
	}
	return Artifact{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func fileExists(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.Mode().IsRegular()
}

// Print writes the listing: each artifact with its size, then each image with its index digest,
// the size of its layout and, per platform, the size of its image.
func (l Listing) Print(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%9s  %s\n", "size", "file in "+l.Dir)
	for _, a := range l.Artifacts {
		fmt.Fprintf(&b, "%9s  %s\n", HumanSize(a.Size), a.Path)
	}
	if _, err := io.WriteString(w, b.String()); err != nil || len(l.Images) == 0 {
		return err
	}
	var platforms []string
	for _, img := range l.Images {
		for _, p := range img.Platforms {
			if !slices.Contains(platforms, p.Platform) {
				platforms = append(platforms, p.Platform)
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nimage\tindex digest\tlayout\t%s\t(compressed layers + config)\n", strings.Join(platforms, "\t"))
	for _, img := range l.Images {
		row := []string{img.Name + ":" + img.Tag, img.Digest.String(), HumanSize(img.LayoutSize)}
		for _, p := range platforms {
			i := slices.IndexFunc(img.Platforms, func(ip ImagePlatform) bool { return ip.Platform == p })
			if i < 0 {
				row = append(row, "-")
				continue
			}
			row = append(row, HumanSize(img.Platforms[i].Size))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// HumanSize is n bytes in B, kB or MB (powers of 1000, one decimal).
func HumanSize(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
