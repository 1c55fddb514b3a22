package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNetworkNamespacesUnderALaterBindAreReleased: containerd mounted pods' network namespaces
// in the plain namespace dir, then Podman bound the dir onto itself (MS_BIND|MS_REC, then
// shared), which hid them. containerd could neither unmount nor unlink them and Down failed with
// "mounts remain". Down now lifts the bind and removes them.
func TestNetworkNamespacesUnderALaterBindAreReleased(t *testing.T) {
	base := mountScratch(t)
	dir := filepath.Join(base, "netns")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Stand-ins for two pods' namespaces: a file bound on each, as containerd binds /proc/PID/ns/net.
	standIn := filepath.Join(base, "ns")
	for _, f := range []string{standIn, filepath.Join(dir, "cni-x"), filepath.Join(dir, "cni-y")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"cni-x", "cni-y"} {
		if err := unix.Mount(standIn, filepath.Join(dir, ns), "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind a namespace stand-in: %v", err)
		}
	}
	// What Podman does to a namespace dir that is not a mount point.
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	// What containerd does when the pod goes: cni-x's original mount is hidden under the bind.
	if err := unix.Unmount(filepath.Join(dir, "cni-x"), unix.MNT_DETACH); err != nil {
		t.Fatalf("unmount the copy of cni-x: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "cni-x")); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("removing a namespace file hidden under the bind: got %v, want EBUSY (the set-up no longer hides it)", err)
	}
	if err := unix.Unmount(filepath.Join(dir, "cni-x"), 0); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("unmounting a namespace hidden under the bind: got %v, want EINVAL (the set-up no longer hides it)", err)
	}

	var logged strings.Builder
	logf := func(f string, a ...any) { fmt.Fprintf(&logged, f+"\n", a...) }
	if err := releaseNetns(dir, filepath.Join(base, "no-marker"), logf); err != nil {
		t.Fatalf("release: %v\nlogged:\n%s", err, logged.String())
	}
	if !strings.Contains(logged.String(), "lifted 1 bind(s) hiding network namespaces on "+dir) {
		t.Errorf("release did not say what it lifted; it logged:\n%s", logged.String())
	}
	if mps, err := mountsUnder(dir); err != nil || len(mps) > 0 {
		t.Errorf("mounts remain under the namespace dir: %v (%v)", mps, err)
	}
	for _, ns := range []string{"cni-x", "cni-y"} {
		if _, err := os.Stat(filepath.Join(dir, ns)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace file %s: got %v, want it removed", ns, err)
		}
	}
}

// The cluster makes a plain namespace dir a shared mount point, so that a tool wanting it shared
// (Podman) stacks nothing, and removes that bind at Down. A bind another tool made stays.
func TestTheClusterSharesTheNamespaceDirAndRemovesOnlyItsOwnBind(t *testing.T) {
	t.Run("a plain dir is bound, shared and given back", func(t *testing.T) {
		base, logf := mountScratch(t), logTo(t)
		dir, marker := filepath.Join(base, "netns"), filepath.Join(base, "host", "netns-bind")
		if err := shareNetns(dir, marker, logf); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("the bind is not recorded: %v", err)
		}
		// Podman's test: making the dir shared fails with EINVAL when it is no mount point.
		if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
			t.Fatalf("the dir is no mount point after Up: %v", err)
		}
		standIn := filepath.Join(base, "ns")
		for _, f := range []string{standIn, filepath.Join(dir, "cni-x")} {
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mount(standIn, filepath.Join(dir, "cni-x"), "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		if err := releaseNetns(dir, marker, logf); err != nil {
			t.Fatal(err)
		}
		if mps, err := mountsUnder(dir); err != nil || len(mps) > 0 {
			t.Errorf("mounts remain on or under the namespace dir: %v (%v)", mps, err)
		}
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the record of the bind stays: %v", err)
		}
	})
	t.Run("another tool's bind stays", func(t *testing.T) {
		base, logf := mountScratch(t), logTo(t)
		dir, marker := filepath.Join(base, "netns"), filepath.Join(base, "host", "netns-bind")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		if err := shareNetns(dir, marker, logf); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a bind the cluster did not make is recorded as its own: %v", err)
		}
		if err := releaseNetns(dir, marker, logf); err != nil {
			t.Fatal(err)
		}
		if mps, err := mountsUnder(dir); err != nil || len(mps) != 1 {
			t.Errorf("mounts on the namespace dir after Down: %v (%v), want the other tool's bind alone", mps, err)
		}
	})
}

func logTo(t *testing.T) func(string, ...any) {
	return func(f string, a ...any) { t.Logf(f, a...) }
}

// mountScratch mounts a tmpfs on a temporary dir, and detaches it with every mount below it at
// the end of the test.
func mountScratch(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts: run it as root")
	}
	base := t.TempDir()
	if err := unix.Mount("tmpfs", base, "tmpfs", 0, ""); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(base, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the scratch tmpfs: %v", err)
		}
	})
	return base
}
