package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/s3csi/s3csi/hack/imagebuild/sbom"
)

const (
	// ArchPlaceholder stands, in the source of a Spec's files, for the architecture of each
	// platform BuildIndex builds: -file /s3csi-controller=bin/linux_{arch}/s3csi-controller.
	ArchPlaceholder = "{arch}"
	// RefNameAnnotation names the image index in the layout's index.json: its tag, as
	// `imagebuild push` and skopeo's oci:DIR:TAG read it.
	RefNameAnnotation = "org.opencontainers.image.ref.name"
	// sourceLabel is the image label whose URL prefixes the SBOMs' namespaces.
	sourceLabel = "org.opencontainers.image.source"
)

// archPattern is what BuildIndex accepts as an architecture: a GOARCH.
var archPattern = regexp.MustCompile(`^[a-z0-9]+$`)

// PlatformResult describes one platform image of an index.
type PlatformResult struct {
	// Arch is the platform's architecture; its OS is linux.
	Arch string
	// Manifest is the digest of the platform image's manifest.
	Manifest v1.Hash
	// LayerSize is the compressed size of the image's one layer: what a node pulls.
	LayerSize int64
	// SBOM is the SPDX document of the image's program, beside the layout.
	SBOM string
}

// IndexResult says what BuildIndex did.
type IndexResult struct {
	// Digest is the image index's digest.
	Digest v1.Hash
	// Tag is the index's tag in the layout (RefNameAnnotation).
	Tag string
	// Platforms are the index's images, in the order of the architectures asked for.
	Platforms []PlatformResult
	// Unchanged is true when the layout was already up to date and left as it was.
	Unchanged bool
}

// ForArch returns the Spec of s's image for linux/arch: Arch set, and ArchPlaceholder replaced
// by arch in the source of every file.
func (s *Spec) ForArch(arch string) *Spec {
	p := *s
	p.Arch = arch
	p.Files = make([]File, len(s.Files))
	for i, f := range s.Files {
		p.Files[i] = File{Path: f.Path, Source: strings.ReplaceAll(f.Source, ArchPlaceholder, arch)}
	}
	return &p
}

// BuildIndex writes the image of s for each of archs (linux/ARCH) as one OCI image index into
// the OCI layout directory out, tagged with the tag of s.Ref. Each platform image gets an SPDX
// SBOM of its program (the entrypoint's file, a Go binary), written twice: into the layout as an
// artifact whose subject is the image's manifest (pushed with the index), and as
// sbomDir/<base of out>-<arch>.spdx.json.
//
// The program's build information must say it was built for linux/ARCH with CGO_ENABLED=0: an
// image of the wrong architecture or a dynamically linked program on an empty base is refused
// here instead of failing on a node.
//
// Like Build, BuildIndex records a digest of its inputs in out.inputs and leaves an up-to-date
// layout alone; the layout is written beside out and renamed into place.
func BuildIndex(s *Spec, archs []string, out, sbomDir string) (IndexResult, error) {
	tag, err := checkIndexArgs(s, archs, out, sbomDir)
	if err != nil {
		return IndexResult{}, err
	}
	base := filepath.Base(out)
	sbomPath := func(arch string) string { return filepath.Join(sbomDir, base+"-"+arch+".spdx.json") }
	specs, inputs, err := indexInputs(s, archs, sbomPath(""))
	if err != nil {
		return IndexResult{}, err
	}
	if recorded, err := os.ReadFile(inputsPath(out)); err == nil && string(recorded) == inputs {
		if r, err := ReadIndex(out, archs, sbomPath); err == nil {
			r.Unchanged = true
			return r, nil
		}
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var artifacts []v1.Image
	sboms := map[string][]byte{}
	for _, ps := range specs {
		img, doc, err := platformImage(ps, tag)
		if err != nil {
			return IndexResult{}, err
		}
		subject, err := manifestDescriptor(img)
		if err != nil {
			return IndexResult{}, fmt.Errorf("describe %s for linux/%s: %w", s.Ref, ps.Arch, err)
		}
		art, err := newArtifact(sbom.MediaType, doc, filepath.Base(sbomPath(ps.Arch)), subject,
			map[string]string{"org.opencontainers.image.created": s.Created.UTC().Format(time.RFC3339)})
		if err != nil {
			return IndexResult{}, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        runnableImage{img},
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: ps.Arch}},
		})
		artifacts = append(artifacts, art)
		sboms[ps.Arch] = doc
	}
	annotated, ok := mutate.Annotations(idx, s.Labels).(v1.ImageIndex)
	if !ok {
		return IndexResult{}, fmt.Errorf("annotate index of %s: not an index", s.Ref)
	}
	// As in Build, the record goes first and the layout is renamed into place, so an interrupted
	// build never leaves a stale layout that looks up to date.
	_ = os.Remove(inputsPath(out))
	if err := writeLayout(out, annotated, tag.TagStr(), artifacts); err != nil {
		return IndexResult{}, fmt.Errorf("write layout of %s: %w", s.Ref, err)
	}
	for arch, doc := range sboms {
		if err := writeFileAtomic(sbomPath(arch), doc); err != nil {
			return IndexResult{}, fmt.Errorf("write SBOM of %s: %w", s.Ref, err)
		}
	}
	if err := os.WriteFile(inputsPath(out), []byte(inputs), 0o644); err != nil {
		return IndexResult{}, fmt.Errorf("record inputs of %s: %w", s.Ref, err)
	}
	return ReadIndex(out, archs, sbomPath)
}

// indexInputs returns the Spec of each platform and a digest of everything the index is made of:
// the platforms, where the SBOMs go, and each platform's Spec.InputDigest.
func indexInputs(s *Spec, archs []string, sbomPrefix string) ([]*Spec, string, error) {
	specs := make([]*Spec, len(archs))
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(struct {
		Format int
		Archs  []string
		SBOMs  string
	}{1, archs, sbomPrefix}); err != nil {
		return nil, "", fmt.Errorf("encode inputs of %s: %w", s.Ref, err)
	}
	for i, arch := range archs {
		specs[i] = s.ForArch(arch)
		d, err := specs[i].InputDigest()
		if err != nil {
			return nil, "", err
		}
		_, _ = h.Write([]byte(d))
	}
	return specs, hex.EncodeToString(h.Sum(nil)), nil
}

// runnableImage is an image whose descriptor in an index has no artifactType: go-containerregistry
// would set its config's media type there, which OCI reserves for artifacts (docker buildx and
// other builders leave it out for images).
type runnableImage struct{ v1.Image }

// ArtifactType is read by go-containerregistry's partial.Descriptor.
func (runnableImage) ArtifactType() (string, error) { return "", nil }

// checkIndexArgs validates BuildIndex's arguments and returns the tag of s.Ref.
func checkIndexArgs(s *Spec, archs []string, out, sbomDir string) (name.Tag, error) {
	if out == "" || sbomDir == "" {
		return name.Tag{}, fmt.Errorf("build index: an output layout and an SBOM directory are required")
	}
	if len(archs) == 0 {
		return name.Tag{}, fmt.Errorf("build index %s: at least one platform is required", s.Ref)
	}
	for i, a := range archs {
		if !archPattern.MatchString(a) {
			return name.Tag{}, fmt.Errorf("build index %s: architecture %q is not a GOARCH", s.Ref, a)
		}
		if slices.Contains(archs[:i], a) {
			return name.Tag{}, fmt.Errorf("build index %s: platform linux/%s given twice", s.Ref, a)
		}
	}
	if !strings.HasPrefix(s.Labels[sourceLabel], "https://") {
		return name.Tag{}, fmt.Errorf("build index %s: the label %s (an https URL) is required: it names the SBOMs", s.Ref, sourceLabel)
	}
	tag, err := name.NewTag(s.Ref, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("parse reference %s: %w", s.Ref, err)
	}
	return tag, nil
}

// platformImage assembles the OCI image of ps and the SPDX document of its program.
func platformImage(ps *Spec, tag name.Tag) (v1.Image, []byte, error) {
	if err := ps.Validate(); err != nil {
		return nil, nil, err
	}
	i := slices.IndexFunc(ps.Files, func(f File) bool { return f.Path == ps.program() })
	if i < 0 {
		return nil, nil, fmt.Errorf("build %s for linux/%s: the program %s is not a file of the image (the SBOM describes it)",
			ps.Ref, ps.Arch, ps.program())
	}
	prog := ps.Files[i]
	bi, sum, err := sbom.ReadBinary(prog.Source)
	if err != nil {
		return nil, nil, fmt.Errorf("build %s for linux/%s: %w", ps.Ref, ps.Arch, err)
	}
	if err := checkProgram(bi, ps.Arch); err != nil {
		return nil, nil, fmt.Errorf("build %s for linux/%s: %s %w", ps.Ref, ps.Arch, prog.Source, err)
	}
	repo := tag.Context().RepositoryStr()
	doc, err := sbom.New(bi, sum, sbom.Options{
		Name:      fmt.Sprintf("%s:%s linux/%s", repo, tag.TagStr(), ps.Arch),
		Namespace: fmt.Sprintf("%s/spdx/%s/%s/linux-%s", strings.TrimSuffix(ps.Labels[sourceLabel], "/"), repo, tag.TagStr(), ps.Arch),
		FileName:  prog.Path,
		Created:   ps.Created,
	}).JSON()
	if err != nil {
		return nil, nil, err
	}
	img, err := OCIImage(ps)
	if err != nil {
		return nil, nil, err
	}
	return img, doc, nil
}

// checkProgram reports a program whose build settings do not fit a linux/arch image on an
// empty base.
func checkProgram(bi *debug.BuildInfo, arch string) error {
	var errs []error
	for _, want := range [][2]string{{"GOOS", "linux"}, {"GOARCH", arch}, {"CGO_ENABLED", "0"}} {
		if got, _ := sbom.Setting(bi, want[0]); got != want[1] {
			errs = append(errs, fmt.Errorf("was built with %s=%q, want %q", want[0], got, want[1]))
		}
	}
	return errors.Join(errs...)
}

// manifestDescriptor is the descriptor of img's manifest: the subject of its SBOM.
func manifestDescriptor(img v1.Image) (v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size}, nil
}
