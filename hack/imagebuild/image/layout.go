package image

import (
	"fmt"
	"os"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// writeLayout writes a fresh OCI layout at out: idx, tagged tag, then the artifacts that refer
// to its images.
func writeLayout(out string, idx v1.ImageIndex, tag string, artifacts []v1.Image) error {
	tmp := out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefNameAnnotation: tag})); err != nil {
		return err
	}
	for _, a := range artifacts {
		if err := p.AppendImage(a); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadIndex reads the layout BuildIndex wrote at out back: the tagged index and, for each of
// archs in order, its image's manifest digest and layer size, and the SBOM file at sbomPath(arch),
// which must exist.
func ReadIndex(out string, archs []string, sbomPath func(arch string) string) (IndexResult, error) {
	l, err := ReadLayout(out)
	if err != nil {
		return IndexResult{}, err
	}
	idx := l.Index
	r := IndexResult{Tag: l.Tag}
	if r.Digest, err = idx.Digest(); err != nil {
		return IndexResult{}, fmt.Errorf("read index in %s: %w", out, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return IndexResult{}, fmt.Errorf("read index in %s: %w", out, err)
	}
	for _, arch := range archs {
		i := slices.IndexFunc(im.Manifests, func(d v1.Descriptor) bool {
			return d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == arch
		})
		if i < 0 {
			return IndexResult{}, fmt.Errorf("read index in %s: no image for linux/%s", out, arch)
		}
		img, err := idx.Image(im.Manifests[i].Digest)
		if err != nil {
			return IndexResult{}, fmt.Errorf("read linux/%s image in %s: %w", arch, out, err)
		}
		m, err := img.Manifest()
		if err != nil {
			return IndexResult{}, fmt.Errorf("read linux/%s image in %s: %w", arch, out, err)
		}
		if len(m.Layers) != 1 {
			return IndexResult{}, fmt.Errorf("read linux/%s image in %s: %d layers, want one", arch, out, len(m.Layers))
		}
		if _, err := os.Stat(sbomPath(arch)); err != nil {
			return IndexResult{}, fmt.Errorf("read SBOM of linux/%s image in %s: %w", arch, out, err)
		}
		r.Platforms = append(r.Platforms, PlatformResult{
			Arch: arch, Manifest: im.Manifests[i].Digest, LayerSize: m.Layers[0].Size, SBOM: sbomPath(arch),
		})
	}
	return r, nil
}

// Layout is what an OCI layout written by BuildIndex holds.
type Layout struct {
	// Index is the one image index with a RefNameAnnotation.
	Index v1.ImageIndex
	// Tag is its RefNameAnnotation.
	Tag string
	// Referrers are the layout's other manifests: artifacts whose subject is one of Index's
	// images (the SBOMs).
	Referrers []v1.Image
}

// ReadLayout opens the OCI layout at dir: its one tagged image index, and every other manifest,
// which must be an artifact referring to one of that index's images.
func ReadLayout(dir string) (Layout, error) {
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return Layout{}, fmt.Errorf("read layout %s: %w", dir, err)
	}
	im, err := root.IndexManifest()
	if err != nil {
		return Layout{}, fmt.Errorf("read layout %s: %w", dir, err)
	}
	var l Layout
	var subjects []v1.Hash
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsIndex() && d.Annotations[RefNameAnnotation] != "":
			if l.Index != nil {
				return Layout{}, fmt.Errorf("read layout %s: more than one tagged image index", dir)
			}
			if l.Index, err = root.ImageIndex(d.Digest); err != nil {
				return Layout{}, fmt.Errorf("read layout %s: %w", dir, err)
			}
			l.Tag = d.Annotations[RefNameAnnotation]
		case d.MediaType.IsImage():
			img, err := root.Image(d.Digest)
			if err != nil {
				return Layout{}, fmt.Errorf("read layout %s: %w", dir, err)
			}
			m, err := img.Manifest()
			if err != nil {
				return Layout{}, fmt.Errorf("read layout %s: %w", dir, err)
			}
			if m.Subject == nil {
				return Layout{}, fmt.Errorf("read layout %s: manifest %s is neither the tagged index nor a referrer", dir, d.Digest)
			}
			subjects = append(subjects, m.Subject.Digest)
			l.Referrers = append(l.Referrers, img)
		default:
			return Layout{}, fmt.Errorf("read layout %s: unexpected %s %s", dir, d.MediaType, d.Digest)
		}
	}
	if l.Index == nil {
		return Layout{}, fmt.Errorf("read layout %s: no image index with a %s annotation", dir, RefNameAnnotation)
	}
	children, err := l.Index.IndexManifest()
	if err != nil {
		return Layout{}, fmt.Errorf("read layout %s: %w", dir, err)
	}
	for _, s := range subjects {
		if !slices.ContainsFunc(children.Manifests, func(d v1.Descriptor) bool { return d.Digest == s }) {
			return Layout{}, fmt.Errorf("read layout %s: a referrer's subject %s is not an image of the index", dir, s)
		}
	}
	return l, nil
}
