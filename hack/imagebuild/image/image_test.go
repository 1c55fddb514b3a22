package image

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testSpec returns a spec over a fresh "binary" in dir, shaped like the product images.
func testSpec(t *testing.T, dir string) *Spec {
	t.Helper()
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"+strings.Repeat("x", 4096)), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Spec{
		Ref:        "docker.io/s3csi/test:0.1.0",
		Files:      []File{{Path: "/s3csi-test", Source: bin}},
		Symlinks:   []Symlink{{Path: "/bin/test", Target: "/s3csi-test"}},
		Dirs:       []Dir{{Path: "/tmp", Mode: os.ModeSticky | 0o777}},
		Entrypoint: []string{"/s3csi-test", "--flag"},
		UID:        65532,
		Labels: map[string]string{
			"org.opencontainers.image.title":    "s3csi/test",
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
		Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func TestBuildWritesWhatTheSpecSays(t *testing.T) {
	dir := t.TempDir()
	s := testSpec(t, dir)
	out := filepath.Join(dir, "img.tar")
	if _, err := Build(s, out); err != nil {
		t.Fatalf("build: %v", err)
	}
	if err := Check(s, out); err != nil {
		t.Fatalf("check: %v", err)
	}
	img, err := Read(out, s.Ref)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532" || cfg.Config.WorkingDir != "/" || cfg.RootFS.Type != "layers" ||
		cfg.Config.Env[0] != "PATH="+DefaultPath || !cfg.Created.Equal(s.Created) {
		t.Errorf("config = %+v", cfg)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	members, err := Members(layers[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/s3csi-test", "/bin", "/bin/test", "/tmp", "/etc", "/etc/passwd", "/etc/group"} {
		h, ok := members[p]
		if !ok {
			t.Errorf("layer lacks %s; has %v", p, members)
			continue
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(layerTime) {
			t.Errorf("%s: owner %d:%d mtime %v, want 0:0 at %v", p, h.Uid, h.Gid, h.ModTime, layerTime)
		}
	}
	if m := members["/tmp"].Mode; m != 0o1777 {
		t.Errorf("/tmp mode %o, want 1777", m)
	}
	if m := members["/s3csi-test"].Mode; m != 0o755 {
		t.Errorf("/s3csi-test mode %o, want 755", m)
	}
}

func TestAccountsNameTheImageUser(t *testing.T) {
	for _, tc := range []struct {
		name string
		uid  int
		want string
	}{
		{"root images name only root", 0, "root:x:0:0:root:/root:/sbin/nologin\n"},
		{"65532 is nonroot", 65532, "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		{"65534 is nobody", 65534, "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Spec{UID: tc.uid}
			passwd := string(s.accounts()["/etc/passwd"])
			if !strings.HasSuffix(passwd, tc.want) {
				t.Errorf("passwd = %q, want it to end with %q", passwd, tc.want)
			}
		})
	}
}

func TestEqualInputsGiveTheSameBytes(t *testing.T) {
	dir := t.TempDir()
	s := testSpec(t, dir)
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	ra, err := Build(s, a)
	if err != nil {
		t.Fatal(err)
	}
	// A later mtime on the source must not change the image.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(s.Files[0].Source, later, later); err != nil {
		t.Fatal(err)
	}
	rb, err := Build(s, b)
	if err != nil {
		t.Fatal(err)
	}
	if ra.Digest != rb.Digest {
		t.Errorf("digests differ: %s and %s", ra.Digest, rb.Digest)
	}
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ba, bb) {
		t.Errorf("tarballs differ (%d and %d bytes)", len(ba), len(bb))
	}
}

func TestUnchangedInputsSkipTheBuild(t *testing.T) {
	dir := t.TempDir()
	s := testSpec(t, dir)
	out := filepath.Join(dir, "img.tar")
	first, err := Build(s, out)
	if err != nil || first.Unchanged {
		t.Fatalf("first build: %+v, %v", first, err)
	}
	st1, _ := os.Stat(out)
	again, err := Build(s, out)
	if err != nil || !again.Unchanged || again.Digest != first.Digest {
		t.Fatalf("second build: %+v, %v; want unchanged %s", again, err, first.Digest)
	}
	st2, _ := os.Stat(out)
	if !st2.ModTime().Equal(st1.ModTime()) {
		t.Errorf("an unchanged build rewrote the tarball")
	}

	t.Run("a changed file rebuilds", func(t *testing.T) {
		if err := os.WriteFile(s.Files[0].Source, []byte("other content"), 0o755); err != nil {
			t.Fatal(err)
		}
		r, err := Build(s, out)
		if err != nil || r.Unchanged || r.Digest == first.Digest {
			t.Fatalf("build after change: %+v, %v", r, err)
		}
	})
	t.Run("a changed label rebuilds", func(t *testing.T) {
		s.Labels["org.opencontainers.image.version"] = "9.9.9"
		r, err := Build(s, out)
		if err != nil || r.Unchanged {
			t.Fatalf("build after change: %+v, %v", r, err)
		}
	})
	t.Run("a tarball that no longer matches its record rebuilds", func(t *testing.T) {
		if err := os.WriteFile(out, []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Build(s, out)
		if err != nil || r.Unchanged {
			t.Fatalf("build over a broken tarball: %+v, %v", r, err)
		}
		if err := Check(s, out); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCheckReportsEveryDifference(t *testing.T) {
	dir := t.TempDir()
	s := testSpec(t, dir)
	out := filepath.Join(dir, "img.tar")
	if _, err := Build(s, out); err != nil {
		t.Fatal(err)
	}
	other := *s
	other.UID = 0
	other.Entrypoint = []string{"/s3csi-test"}
	other.Cmd = []string{"pause"}
	other.Labels = map[string]string{"org.opencontainers.image.licenses": "GPL-2.0-only"}
	other.Symlinks = []Symlink{{Path: "/bin/test", Target: "/elsewhere"}}
	err := Check(&other, out)
	if err == nil {
		t.Fatal("check passed against a different spec")
	}
	for _, want := range []string{"user is 65532", "entrypoint", "cmd is [], want [pause]", "label org.opencontainers.image.licenses", "points to /s3csi-test"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("check error lacks %q:\n%v", want, err)
		}
	}
}

func TestACmdWithoutEntrypointIsTheProgram(t *testing.T) {
	s := testSpec(t, t.TempDir())
	s.Entrypoint, s.Cmd = nil, []string{"/bin/test", "-x"}
	if err := s.Validate(); err != nil {
		t.Errorf("validate refused a cmd naming a link of the image: %v", err)
	}
}

func TestValidateRefusesBrokenSpecs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Spec)
	}{
		{"an entrypoint outside the image", func(s *Spec) { s.Entrypoint = []string{"/nowhere"} }},
		{"no entrypoint and no cmd", func(s *Spec) { s.Entrypoint = nil }},
		{"a cmd outside the image and no entrypoint", func(s *Spec) { s.Entrypoint, s.Cmd = nil, []string{"/nowhere"} }},
		{"a relative path", func(s *Spec) { s.Files[0].Path = "s3csi-test" }},
		{"a path given twice", func(s *Spec) { s.Dirs = append(s.Dirs, Dir{Path: "/bin/test", Mode: 0o755}) }},
		{"an env without =", func(s *Spec) { s.Env = []string{"FOO"} }},
		{"no reference", func(s *Spec) { s.Ref = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec(t, t.TempDir())
			tc.modify(s)
			if err := s.Validate(); err == nil {
				t.Error("validate accepted it")
			}
		})
	}
}
