package release

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

// writeLayout writes an OCI layout at dir as `imagebuild index` does: an image index tagged tag
// with an image per arch, and returns the index's digest and each image's pulled size, counted
// from the blobs on disk.
func writeLayout(t *testing.T, dir, tag string, archs ...string) (v1.Hash, []int64) {
	t.Helper()
	var adds []mutate.IndexAddendum
	for i := range archs {
		img, err := random.Image(int64(1000*(i+1)), 2)
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: archs[i]}}})
	}
	idx := mutate.AppendManifests(empty.Index, adds...)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: tag})); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, a := range adds {
		m, err := a.Add.(v1.Image).Manifest()
		if err != nil {
			t.Fatal(err)
		}
		var size int64
		for _, blob := range append([]v1.Descriptor{m.Config}, m.Layers...) {
			info, err := os.Stat(filepath.Join(dir, "blobs", blob.Digest.Algorithm, blob.Digest.Hex))
			if err != nil {
				t.Fatal(err)
			}
			size += info.Size()
		}
		sizes = append(sizes, size)
	}
	return d, sizes
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestChecksumsCoverEveryReleaseFileAndNameTheImagesByIndexDigest(t *testing.T) {
	dir := t.TempDir()
	ctrl, ctrlSizes := writeLayout(t, filepath.Join(dir, "images", "controller"), "1.2.3", "amd64", "arm64")
	mnt, _ := writeLayout(t, filepath.Join(dir, "images", "mounter"), "1.2.3", "amd64")
	writeFile(t, filepath.Join(dir, "images", "controller.inputs"), "sha256:inputs\n")
	writeFile(t, filepath.Join(dir, "charts", "s3csi-1.2.3.tgz"), "chart")
	writeFile(t, filepath.Join(dir, "plugin", "s3csi.yaml"), "kind: Plugin\n")
	writeFile(t, filepath.Join(dir, "plugin", "s3csi.yaml.tmp"), "unfinished")
	writeFile(t, filepath.Join(dir, "sbom", "controller-amd64.spdx.json"), "{}")

	l, err := Checksum(dir)
	if err != nil {
		t.Fatal(err)
	}
	images, err := os.ReadFile(filepath.Join(dir, ImagesFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := "controller " + ctrl.String() + "\nmounter " + mnt.String() + "\n"; string(images) != want {
		t.Errorf("images.txt:\n%s\nwant\n%s", images, want)
	}
	if len(l.Images) != 2 || l.Images[0].Tag != "1.2.3" || len(l.Images[0].Platforms) != 2 {
		t.Fatalf("images %+v, want controller:1.2.3 with two platforms, then mounter", l.Images)
	}
	for i, p := range l.Images[0].Platforms {
		if want := "linux/" + []string{"amd64", "arm64"}[i]; p.Platform != want || p.Size != ctrlSizes[i] {
			t.Errorf("controller platform %d: %s %d bytes, want %s %d (config and layers)", i, p.Platform, p.Size, want, ctrlSizes[i])
		}
	}

	sums, err := os.ReadFile(filepath.Join(dir, SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(strings.TrimSuffix(string(sums), "\n"), "\n") {
		sum, path, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("line %q: want <sha256>  <path>", line)
		}
		if got := sha256File(t, filepath.Join(dir, path)); got != sum {
			t.Errorf("%s: listed %s, is %s", path, sum, got)
		}
		listed = append(listed, path)
	}
	want := []string{
		"charts/s3csi-1.2.3.tgz", "images.txt",
		"images/controller/index.json", "images/controller/oci-layout",
		"images/mounter/index.json", "images/mounter/oci-layout",
		"plugin/s3csi.yaml", "sbom/controller-amd64.spdx.json",
	}
	if !slices.Equal(listed, want) {
		t.Errorf("SHA256SUMS lists\n%s\nwant (no blobs, inputs records, unfinished files or itself)\n%s",
			strings.Join(listed, "\n"), strings.Join(want, "\n"))
	}
	if last := l.Artifacts[len(l.Artifacts)-1]; last.Path != SumsFile || last.SHA256 != sha256File(t, filepath.Join(dir, SumsFile)) {
		t.Errorf("last artifact %+v, want SHA256SUMS itself", last)
	}

	if _, err := Checksum(dir); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(filepath.Join(dir, SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(sums) {
		t.Errorf("SHA256SUMS changed when written again:\n%s\nthen\n%s", sums, again)
	}
	var out strings.Builder
	if err := l.Print(&out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"charts/s3csi-1.2.3.tgz", "controller:1.2.3", ctrl.String(), "linux/arm64"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the listing has no %q:\n%s", s, out.String())
		}
	}
}

func TestALayoutWithoutATaggedIndexFailsTheChecksums(t *testing.T) {
	dir := t.TempDir()
	if _, err := layout.Write(filepath.Join(dir, "images", "broken"), empty.Index); err != nil {
		t.Fatal(err)
	}
	if _, err := Checksum(dir); err == nil || !strings.Contains(err.Error(), "no image index tagged") {
		t.Fatalf("err = %v, want the layout named as having no tagged index", err)
	}
}
