package image

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/s3csi/s3csi/hack/imagebuild/sbom"
)

// buildProgram builds testdata/prog, a static Go program with one dependency, for linux/ARCH of
// each of archs into DIR/ARCH/prog and returns DIR. Go's build cache makes it fast after the
// first run; a missing go command fails the test (go test puts its own first on the PATH).
func buildProgram(t *testing.T, archs ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, arch := range archs {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, arch, "prog"), "./testdata/prog")
		cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build the test program for linux/%s: %v\n%s", arch, err, out)
		}
	}
	return dir
}

// indexSpec is a spec like a product image's, over the programs buildProgram wrote into dir.
func indexSpec(dir string) *Spec {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return &Spec{
		Ref:        "docker.io/s3csi/test:1.2.3",
		Files:      []File{{Path: "/prog", Source: filepath.Join(dir, ArchPlaceholder, "prog")}},
		Dirs:       []Dir{{Path: "/tmp", Mode: os.ModeSticky | 0o777}},
		Entrypoint: []string{"/prog"},
		UID:        65532,
		Labels: map[string]string{
			"org.opencontainers.image.title":    "s3csi/test",
			"org.opencontainers.image.version":  "1.2.3",
			"org.opencontainers.image.source":   "https://github.com/s3csi/s3csi",
			"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
			"org.opencontainers.image.created":  created.Format(time.RFC3339),
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
		Created: created,
	}
}

// startRegistry serves an in-memory registry, with or without the Referrers API, and returns
// its host:port, on the loopback address.
func startRegistry(t *testing.T, referrersAPI bool) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(referrersAPI)))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestAnIndexPushedToARegistryHasAnImageAndAnSBOMPerPlatform(t *testing.T) {
	archs := []string{"amd64", "arm64"}
	bins := buildProgram(t, archs...)
	s := indexSpec(bins)
	work := t.TempDir()
	out, sbomDir := filepath.Join(work, "images", "test"), filepath.Join(work, "sbom")
	if err := os.MkdirAll(sbomDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var report bytes.Buffer
	args := []string{"index", "-out", out, "-sbom-dir", sbomDir, "-platform", "linux/amd64", "-platform", "linux/arm64",
		"-ref", s.Ref, "-created", s.Created.Format(time.RFC3339), "-user", "65532", "-dir", "/tmp=1777",
		"-file", "/prog=" + s.Files[0].Source, "-entrypoint", "/prog"}
	for k, v := range s.Labels {
		args = append(args, "-label", k+"="+v)
	}
	if err := Main(context.Background(), args, &report); err != nil {
		t.Fatalf("imagebuild index: %v", err)
	}
	if !strings.Contains(report.String(), "linux/amd64") || !strings.Contains(report.String(), "linux/arm64") {
		t.Errorf("index report lacks the platforms: %q", report.String())
	}
	built, err := BuildIndex(s, archs, out, sbomDir)
	if err != nil || !built.Unchanged || built.Tag != "1.2.3" || len(built.Platforms) != 2 {
		t.Fatalf("the same index again: %+v, %v; want it unchanged, tagged 1.2.3, two platforms", built, err)
	}

	for _, tc := range []struct {
		name         string
		referrersAPI bool
	}{
		{"to a registry with the Referrers API", true},
		{"to a registry without, through the referrers tag", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkPushed(t, startRegistry(t, tc.referrersAPI), out, sbomDir, built, s, bins)
		})
	}
}

// checkPushed pushes the layout out to the registry at host and reads it back.
func checkPushed(t *testing.T, host, out, sbomDir string, built IndexResult, s *Spec, bins string) {
	t.Helper()
	var report bytes.Buffer
	if err := Main(context.Background(), []string{"push", "-registry", host + "/s3csi", out}, &report); err != nil {
		t.Fatalf("imagebuild push: %v", err)
	}
	if want := "pushed " + host + "/s3csi/test:1.2.3@" + built.Digest.String() + " (2 images, 2 referrers)"; strings.TrimSpace(report.String()) != want {
		t.Errorf("push report %q, want %q", report.String(), want)
	}

	ref, err := name.NewTag(host+"/s3csi/test:1.2.3", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatalf("read the index back: %v", err)
	}
	if d, _ := idx.Digest(); d != built.Digest {
		t.Errorf("the registry's index is %s, the layout's %s", d, built.Digest)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || im.Annotations["org.opencontainers.image.revision"] != s.Labels["org.opencontainers.image.revision"] {
		t.Errorf("index media type %s, annotations %v", im.MediaType, im.Annotations)
	}
	var platforms []string
	for _, d := range im.Manifests {
		platforms = append(platforms, d.Platform.String())
		if d.ArtifactType != "" || d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("index entry %s: media type %s, artifact type %q; want an OCI image, no artifact type", d.Platform, d.MediaType, d.ArtifactType)
		}
		t.Run("linux/"+d.Platform.Architecture, func(t *testing.T) {
			checkPlatformImage(t, idx, d, s, bins)
			checkSBOM(t, ref.Context(), d, filepath.Join(sbomDir, "test-"+d.Platform.Architecture+".spdx.json"))
		})
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("index platforms %v, want %v", platforms, want)
	}
}

// checkPlatformImage checks the image d of idx: OCI media type, its config's platform, labels
// and user, and that its layer holds the program built for its architecture.
func checkPlatformImage(t *testing.T, idx v1.ImageIndex, d v1.Descriptor, s *Spec, bins string) {
	t.Helper()
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", mt, types.OCIManifestSchema1)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != d.Platform.Architecture {
		t.Errorf("config platform %s/%s, index says %s", cfg.OS, cfg.Architecture, d.Platform)
	}
	for k, v := range s.Labels {
		if cfg.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cfg.Config.Labels[k], v)
		}
	}
	if cfg.Config.User != "65532" || !slices.Equal(cfg.Config.Entrypoint, []string{"/prog"}) {
		t.Errorf("user %q entrypoint %v", cfg.Config.User, cfg.Config.Entrypoint)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v; want one", len(layers), err)
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
	}
	members, err := Members(layers[0])
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(bins, d.Platform.Architecture, "prog"))
	if err != nil {
		t.Fatal(err)
	}
	if h := members["/prog"]; h == nil || h.Size != st.Size() || members["/etc/passwd"] == nil {
		t.Errorf("layer /prog is %+v, want the %s program of %d bytes", h, d.Platform.Architecture, st.Size())
	}
}

// checkSBOM checks that the registry lists one SPDX document among the referrers of image d,
// equal to the file beside the layout, and that it describes the program built for d's platform.
func checkSBOM(t *testing.T, repo name.Repository, d v1.Descriptor, file string) {
	t.Helper()
	referrers, err := remote.Referrers(repo.Digest(d.Digest.String()))
	if err != nil {
		t.Fatalf("list referrers: %v", err)
	}
	rm, err := referrers.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	// The listing's artifactType is not checked: go-containerregistry's registry takes it from
	// the config's media type, ignoring the manifest's artifactType (the tag fallback has it).
	if len(rm.Manifests) != 1 {
		t.Fatalf("referrers %+v, want one", rm.Manifests)
	}
	art, err := remote.Image(repo.Digest(rm.Manifests[0].Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := art.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != sbom.MediaType || m.Subject == nil || m.Subject.Digest != d.Digest || m.Config.MediaType != types.OCIEmptyJSON {
		t.Errorf("SBOM artifact type %q, subject %+v, config %s; want %s of %s with an empty config",
			m.ArtifactType, m.Subject, m.Config.MediaType, sbom.MediaType, d.Digest)
	}
	layers, err := art.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("SBOM artifact layers %d, %v; want one", len(layers), err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	local, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the SBOM beside the layout: %v", err)
	}
	if !bytes.Equal(pushed, local) {
		t.Errorf("the pushed SBOM differs from %s", file)
	}
	var doc sbom.Document
	if err := json.Unmarshal(pushed, &doc); err != nil {
		t.Fatalf("decode SBOM: %v", err)
	}
	pkg := func(name string) *sbom.Package {
		i := slices.IndexFunc(doc.Packages, func(p sbom.Package) bool { return p.Name == name })
		if i < 0 {
			t.Errorf("the SBOM has no package %s", name)
			return &sbom.Package{}
		}
		return &doc.Packages[i]
	}
	if doc.SPDXVersion != "SPDX-2.3" || !strings.Contains(doc.Name, "linux/"+d.Platform.Architecture) {
		t.Errorf("SBOM %s named %q", doc.SPDXVersion, doc.Name)
	}
	if p := pkg("github.com/s3csi/s3csi/hack/imagebuild"); p.PrimaryPackagePurpose != "APPLICATION" || p.PackageFileName != "/prog" ||
		!slices.ContainsFunc(p.Annotations, func(a sbom.Annotation) bool {
			return a.Comment == "build setting: GOARCH="+d.Platform.Architecture
		}) {
		t.Errorf("main module package %+v, want the application /prog built with GOARCH=%s", p, d.Platform.Architecture)
	}
	if p := pkg("github.com/opencontainers/go-digest"); p.VersionInfo != "v1.0.0" || len(p.Checksums) != 1 ||
		!strings.Contains(p.Comment, "h1:apOUWs51W5PlhuyGyz9FCeeBIOUDA/6nW8Oi/yOhh5U=") {
		t.Errorf("dependency package %+v, want go-digest v1.0.0 with its go.sum hash", p)
	}
	if p := pkg("stdlib"); "go"+p.VersionInfo != strings.Fields(runtime.Version())[0] {
		t.Errorf("stdlib version %q, want the toolchain's %s", p.VersionInfo, runtime.Version())
	}
}

func TestBuildIndexRefusesAProgramThatDoesNotFitThePlatform(t *testing.T) {
	bins := buildProgram(t, "amd64")
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		modify  func(*Spec)
		archs   []string
		wantErr string
	}{
		{"an amd64 program in the arm64 image", func(s *Spec) { s.Files[0].Source = filepath.Join(bins, "amd64", "prog") },
			[]string{"amd64", "arm64"}, `GOARCH="amd64", want "arm64"`},
		{"a program that is not a Go binary", func(s *Spec) { s.Files[0].Source = text },
			[]string{"amd64"}, "read Go build information"},
		{"an entrypoint that is a link", func(s *Spec) {
			s.Symlinks = []Symlink{{Path: "/bin/prog", Target: "/prog"}}
			s.Entrypoint = []string{"/bin/prog"}
		}, []string{"amd64"}, "is not a file of the image"},
		{"no source label to name the SBOM", func(s *Spec) { delete(s.Labels, sourceLabel) },
			[]string{"amd64"}, "label org.opencontainers.image.source"},
		{"a platform given twice", func(*Spec) {}, []string{"amd64", "amd64"}, "given twice"},
		{"no platform", func(*Spec) {}, nil, "at least one platform"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := indexSpec(bins)
			tc.modify(s)
			work := t.TempDir()
			_, err := BuildIndex(s, tc.archs, filepath.Join(work, "test"), work)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if _, err := os.Stat(filepath.Join(work, "test")); !os.IsNotExist(err) {
				t.Errorf("a refused index left a layout behind (%v)", err)
			}
		})
	}
}

func TestIndexesAreReproducibleAndCached(t *testing.T) {
	archs := []string{"amd64", "arm64"}
	s := indexSpec(buildProgram(t, archs...))
	work := t.TempDir()
	out := filepath.Join(work, "test")
	first, err := BuildIndex(s, archs, out, work)
	if err != nil || first.Unchanged {
		t.Fatalf("first build: %+v, %v", first, err)
	}
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	again, err := BuildIndex(s, archs, out, work)
	if err != nil || again.Unchanged || again.Digest != first.Digest {
		t.Fatalf("rebuild of a removed layout: %+v, %v; want it rebuilt as %s", again, err, first.Digest)
	}
	for i, p := range again.Platforms {
		if p.Manifest != first.Platforms[i].Manifest {
			t.Errorf("linux/%s manifest %s, first %s", p.Arch, p.Manifest, first.Platforms[i].Manifest)
		}
	}

	t.Run("a removed SBOM rebuilds", func(t *testing.T) {
		if err := os.Remove(first.Platforms[1].SBOM); err != nil {
			t.Fatal(err)
		}
		r, err := BuildIndex(s, archs, out, work)
		if err != nil || r.Unchanged || r.Digest != first.Digest {
			t.Fatalf("build: %+v, %v", r, err)
		}
	})
	t.Run("a changed label rebuilds", func(t *testing.T) {
		s.Labels["org.opencontainers.image.revision"] = "another"
		r, err := BuildIndex(s, archs, out, work)
		if err != nil || r.Unchanged || r.Digest == first.Digest {
			t.Fatalf("build: %+v, %v", r, err)
		}
	})
	t.Run("one platform fewer rebuilds", func(t *testing.T) {
		r, err := BuildIndex(s, archs[:1], out, work)
		if err != nil || r.Unchanged || len(r.Platforms) != 1 {
			t.Fatalf("build: %+v, %v", r, err)
		}
		l, err := ReadLayout(out)
		if err != nil || len(l.Referrers) != 1 {
			t.Fatalf("layout: %+v, %v; want one referrer", l, err)
		}
	})
}

func TestIndexCommandLine(t *testing.T) {
	base := []string{"index", "-out", "x", "-sbom-dir", "y", "-ref", "docker.io/s3csi/x:1", "-created", "2025-01-01T00:00:00Z",
		"-label", "org.opencontainers.image.source=https://github.com/s3csi/s3csi", "-file", "/x=/nonexistent/{arch}/x", "-entrypoint", "/x"}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no platform", nil, "at least one -platform"},
		{"another OS", []string{"-platform", "darwin/arm64"}, "want linux/ARCH"},
		{"a variant", []string{"-platform", "linux/arm/v7"}, "want linux/ARCH"},
		{"a missing program", []string{"-platform", "linux/arm64"}, "/nonexistent/arm64/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Main(context.Background(), append(slices.Clone(base), tc.args...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
