package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeHelmLike writes a chart tarball as `helm package` does: entries in helm's order (not
// sorted), each stamped with the time of packaging (here at), and helm's gzip comment.
func writeHelmLike(t *testing.T, path string, at time.Time) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Comment = "Helm"
	tw := tar.NewWriter(zw)
	for _, f := range []struct{ name, body string }{
		{"s3csi/Chart.yaml", "name: s3csi\nversion: 1.2.3\n"},
		{"s3csi/values.yaml", "image: {}\n"},
		{"s3csi/templates/a.yaml", "kind: ConfigMap\n"},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: at}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRetimedChartsPackagedAtDifferentTimesAreTheSameBytes(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tgz"), filepath.Join(dir, "b.tgz")
	writeHelmLike(t, a, time.Date(2026, 5, 1, 10, 0, 0, 123456789, time.UTC))
	writeHelmLike(t, b, time.Date(2026, 5, 1, 10, 0, 7, 0, time.UTC))
	if sha256File(t, a) == sha256File(t, b) {
		t.Fatal("the two packagings are already equal: the test proves nothing")
	}
	wa, err := Retime(a, created)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := Retime(b, created)
	if err != nil {
		t.Fatal(err)
	}
	if wa.SHA256 != wb.SHA256 || wa.SHA256 != sha256File(t, a) {
		t.Errorf("retimed: %s and %s (a's file %s), want one digest", wa.SHA256, wb.SHA256, sha256File(t, a))
	}
	again, err := Retime(a, created)
	if err != nil {
		t.Fatal(err)
	}
	if again.SHA256 != wa.SHA256 {
		t.Errorf("retimed twice: %s, once: %s", again.SHA256, wa.SHA256)
	}
	es := readTarGz(t, a)
	var names []string
	for _, e := range es {
		names = append(names, e.hdr.Name)
		if !e.hdr.ModTime.Equal(created) || e.hdr.Mode != 0o644 {
			t.Errorf("%s: time %v mode %o, want %v and 0644", e.hdr.Name, e.hdr.ModTime, e.hdr.Mode, created)
		}
	}
	if got := strings.Join(names, " "); got != "s3csi/Chart.yaml s3csi/values.yaml s3csi/templates/a.yaml" {
		t.Errorf("entries %s, want helm's order kept", got)
	}
	if string(es[0].body) != "name: s3csi\nversion: 1.2.3\n" {
		t.Errorf("Chart.yaml = %q", es[0].body)
	}
	f, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Comment != "Helm" {
		t.Errorf("gzip comment %q, want helm's kept", zr.Comment)
	}
}

func TestAnArchiveEntryOutsideTheArchiveIsRefused(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "f")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/etc/passwd", "../x", "a/../../x", ""} {
		if _, err := WriteTarGz(filepath.Join(dir, "out.tar.gz"), []File{{Name: name, Source: src, Mode: 0o644}}, created); err == nil {
			t.Errorf("entry %q: written, want refused", name)
		}
	}
	if _, err := WriteTarGz(filepath.Join(dir, "out.tar.gz"), []File{{Name: "a", Source: src}, {Name: "a", Source: src}}, created); err == nil {
		t.Error("an entry given twice: written, want refused")
	}
	if _, err := os.Stat(filepath.Join(dir, "out.tar.gz.tmp")); !os.IsNotExist(err) {
		t.Errorf("a temporary file is left behind: %v", err)
	}
}
