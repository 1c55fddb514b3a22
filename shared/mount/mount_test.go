package mount

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestBindMountLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes bind mounts: run it as root")
	}
	dir := t.TempDir()
	source, target := filepath.Join(dir, "source"), filepath.Join(dir, "target")
	for _, d := range []string{source, target} {
		if err := os.Mkdir(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(source, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })

	if st, _, err := Check(filepath.Join(dir, "missing")); err != nil || st != Missing {
		t.Fatalf("missing path: %s, %v", st, err)
	}
	if st, _, err := Check(target); err != nil || st != NotMounted {
		t.Fatalf("plain dir: %s, %v", st, err)
	}
	if err := BindMount(source, target, true); err != nil {
		t.Fatal(err)
	}
	st, entry, err := Check(target)
	if err != nil || st != Mounted {
		t.Fatalf("bind: %s, %v", st, err)
	}
	table, err := ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	if src, ok := table.Lookup(target); !ok || !SameDevice(src, entry) {
		t.Fatal("the bind is not in the mount table")
	}
	if err := os.WriteFile(filepath.Join(target, "g"), nil, 0o600); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write through a read-only bind: %v, want EROFS", err)
	}
	if err := RemoveDir(target); err == nil {
		t.Fatal("RemoveDir removed a mount point")
	}
	for range 2 {
		if err := Unmount(target); err != nil {
			t.Fatalf("unmount: %v", err)
		}
	}
	if err := Unmount(filepath.Join(dir, "missing")); err != nil {
		t.Fatalf("unmount of a missing path: %v", err)
	}
	if err := RemoveDir(source); err == nil {
		t.Fatal("RemoveDir removed a non-empty dir")
	}
	if got, err := os.ReadFile(filepath.Join(source, "f")); err != nil || string(got) != "x" {
		t.Fatal("the source's content changed")
	}
}
