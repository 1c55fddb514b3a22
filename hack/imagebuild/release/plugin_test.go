package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The platforms `make plugin` releases.
var releasePlatforms = [][2]string{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}

// buildPlugins builds the image tests' program (a static Go binary) as a stand-in for
// kubectl-s3csi for each of platforms, into DIR/<os>_<arch>/kubectl-s3csi, and returns the
// platforms. A missing go command fails the test (go test puts its own first on the PATH).
func buildPlugins(t *testing.T, platforms [][2]string) []Platform {
	t.Helper()
	dir := t.TempDir()
	var out []Platform
	for _, p := range platforms {
		bin := filepath.Join(dir, p[0]+"_"+p[1], PluginBinary)
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "../image/testdata/prog")
		cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOOS="+p[0], "GOARCH="+p[1])
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build the test program for %s/%s: %v\n%s", p[0], p[1], err, b)
		}
		out = append(out, Platform{OS: p[0], Arch: p[1], Binary: bin})
	}
	return out
}

var created = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func pluginOptions(out string, platforms []Platform) PluginOptions {
	return PluginOptions{
		Out: out, Version: "1.2.3", URL: "https://github.com/s3csi/s3csi/releases/download/v1.2.3/",
		Homepage: "https://github.com/s3csi/s3csi", License: "../../../LICENSE", Created: created,
		Platforms: platforms,
	}
}

// entry is a member of a tarball as read back.
type entry struct {
	hdr  *tar.Header
	body []byte
}

func readTarGz(t *testing.T, path string) []entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("%s: gzip header has name %q and time %v, want none", path, zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var es []entry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return es
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, entry{h, b})
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestTheKrewManifestNamesEveryPlatformsArchiveWithItsChecksum(t *testing.T) {
	platforms := buildPlugins(t, releasePlatforms)
	out := t.TempDir()
	written, err := WritePlugin(pluginOptions(out, platforms))
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != len(platforms)+1 {
		t.Fatalf("wrote %d files, want an archive per platform and the manifest", len(written))
	}
	doc, err := os.ReadFile(filepath.Join(out, "s3csi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m KrewPlugin
	if err := yaml.UnmarshalStrict(doc, &m); err != nil {
		t.Fatalf("read the manifest back: %v\n%s", err, doc)
	}
	// What Krew's manifest validation requires (krew internal/index/validation).
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "s3csi" {
		t.Errorf("apiVersion, kind, name = %q, %q, %q", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if m.Spec.Version != "v1.2.3" || m.Spec.Homepage != "https://github.com/s3csi/s3csi" {
		t.Errorf("version %q, homepage %q", m.Spec.Version, m.Spec.Homepage)
	}
	if m.Spec.ShortDescription == "" || strings.ContainsAny(m.Spec.ShortDescription, "\r\n") || m.Spec.Description == "" {
		t.Errorf("shortDescription %q (one line, required), description %q (required)", m.Spec.ShortDescription, m.Spec.Description)
	}
	license, err := os.ReadFile("../../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Spec.Platforms) != len(platforms) {
		t.Fatalf("%d platforms in the manifest, want %d", len(m.Spec.Platforms), len(platforms))
	}
	for i, p := range platforms {
		mp := m.Spec.Platforms[i]
		name := "kubectl-s3csi_1.2.3_" + p.OS + "_" + p.Arch + ".tar.gz"
		if want := map[string]string{"os": p.OS, "arch": p.Arch}; !equalMaps(mp.Selector.MatchLabels, want) {
			t.Errorf("platform %d: matchLabels %v, want %v", i, mp.Selector.MatchLabels, want)
		}
		if want := "https://github.com/s3csi/s3csi/releases/download/v1.2.3/" + name; mp.URI != want {
			t.Errorf("%s/%s: uri %q, want %q", p.OS, p.Arch, mp.URI, want)
		}
		if got := sha256File(t, filepath.Join(out, name)); mp.SHA256 != got {
			t.Errorf("%s/%s: sha256 %s, the archive's is %s", p.OS, p.Arch, mp.SHA256, got)
		}
		if mp.Bin != "kubectl-s3csi" || !slices.Equal(mp.Files, []KrewFile{{From: "*", To: "."}}) {
			t.Errorf("%s/%s: bin %q, files %v", p.OS, p.Arch, mp.Bin, mp.Files)
		}
		bin, err := os.ReadFile(p.Binary)
		if err != nil {
			t.Fatal(err)
		}
		es := readTarGz(t, filepath.Join(out, name))
		want := []struct {
			name string
			mode int64
			body []byte
		}{{"LICENSE", 0o644, license}, {"kubectl-s3csi", 0o755, bin}}
		if len(es) != len(want) {
			t.Fatalf("%s holds %d entries, want LICENSE and kubectl-s3csi", name, len(es))
		}
		for j, w := range want {
			h := es[j].hdr
			if h.Name != w.name || h.Typeflag != tar.TypeReg || h.Mode != w.mode || !bytes.Equal(es[j].body, w.body) {
				t.Errorf("%s entry %d: %q type %c mode %o (%d bytes), want %q, a file of mode %o and the source's %d bytes",
					name, j, h.Name, h.Typeflag, h.Mode, len(es[j].body), w.name, w.mode, len(w.body))
			}
			if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(created) {
				t.Errorf("%s entry %q: owner %d:%d (%q:%q), time %v; want 0:0 unnamed, %v", name, h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, created)
			}
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestThePluginBuiltTwiceGivesTheSameBytes(t *testing.T) {
	platforms := buildPlugins(t, releasePlatforms[:2])
	first, second := t.TempDir(), t.TempDir()
	if _, err := WritePlugin(pluginOptions(first, platforms)); err != nil {
		t.Fatal(err)
	}
	// What differs between two builds of equal files: the sources' times and the directory.
	later := time.Now().Add(time.Hour)
	for _, p := range platforms {
		if err := os.Chtimes(p.Binary, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := WritePlugin(pluginOptions(second, platforms)); err != nil {
		t.Fatal(err)
	}
	names, err := filepath.Glob(filepath.Join(first, "*"))
	if err != nil || len(names) != 3 {
		t.Fatalf("wrote %v (%v), want two archives and the manifest", names, err)
	}
	for _, n := range names {
		a, b := sha256File(t, n), sha256File(t, filepath.Join(second, filepath.Base(n)))
		if a != b {
			t.Errorf("%s: sha256 %s, then %s", filepath.Base(n), a, b)
		}
	}
}

func TestABinaryOfAnotherPlatformIsRefused(t *testing.T) {
	platforms := buildPlugins(t, [][2]string{{"linux", "amd64"}})
	platforms[0].Arch = "arm64"
	_, err := WritePlugin(pluginOptions(t.TempDir(), platforms))
	if err == nil || !strings.Contains(err.Error(), `GOARCH="amd64", want "arm64"`) {
		t.Fatalf("err = %v, want the binary refused for its GOARCH", err)
	}
}

func TestAVersionWithAVOrNoneIsRefused(t *testing.T) {
	for _, v := range []string{"v1.2.3", "", "1.2"} {
		o := pluginOptions(t.TempDir(), []Platform{{OS: "linux", Arch: "amd64", Binary: "/nonexistent"}})
		o.Version = v
		if _, err := WritePlugin(o); err == nil || !strings.Contains(err.Error(), "semantic version") {
			t.Errorf("version %q: err = %v, want it refused", v, err)
		}
	}
}
