package mount

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// unansweredFUSE mounts FUSE on a new dir and never reads its /dev/fuse: every request through
// the mount waits, as with a stopped server. Cleanup closes the device, which aborts the
// connection (the blocked probes return ENOTCONN), and detaches the mount.
func unansweredFUSE(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts FUSE: run it as root")
	}
	dir := filepath.Join(t.TempDir(), "fuse")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	dev, err := FUSE(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dev.Close()
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	return dir
}

func TestAProbeOfAServerThatNeverAnswersReturnsInTime(t *testing.T) {
	dir := unansweredFUSE(t)
	for _, tc := range []struct {
		name    string
		maxTook time.Duration
	}{
		{name: "the first probe waits for its timeout and leaves one probe blocked", maxTook: time.Second},
		{name: "a second probe returns at once while the first is still blocked", maxTook: 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			state, entry, err := CheckWithin(dir, 200*time.Millisecond)
			took := time.Since(start)
			if err != nil || state != Hung || entry.MountPoint != dir {
				t.Fatalf("check = %s, %+v, %v; want not answering, with the mount's entry", state, entry, err)
			}
			if took > tc.maxTook {
				t.Fatalf("check took %s, want at most %s", took, tc.maxTook)
			}
			if n := stuckProbes(dir); n != maxStuckProbes || !Stuck(dir) {
				t.Fatalf("%d probes blocked, want %d", n, maxStuckProbes)
			}
		})
	}
	t.Run("a plain unmount is refused while a probe is blocked, and detaching removes the mount", func(t *testing.T) {
		if err := unix.Unmount(dir, 0); !errors.Is(err, unix.EBUSY) {
			t.Fatalf("unmount: %v, want EBUSY", err)
		}
		if err := Detach(dir); err != nil {
			t.Fatal(err)
		}
		table, err := ReadTable()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := table.Lookup(dir); ok {
			t.Fatal("still mounted after Detach")
		}
	})
}

func TestABlockedProbeIsReleasedWhenTheConnectionEnds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fuse")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	dev, err := FUSE(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dev.Close()
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	if _, err := Stat(dir, 100*time.Millisecond); !errors.Is(err, ErrNotAnswering) {
		t.Fatalf("stat: %v, want ErrNotAnswering", err)
	}
	_ = dev.Close() // the server is gone: the kernel fails the waiting request
	deadline := time.Now().Add(5 * time.Second)
	for Stuck(dir) {
		if time.Now().After(deadline) {
			t.Fatal("the blocked probe did not return after the connection ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if state, _, err := CheckWithin(dir, time.Second); err != nil || state != Corrupted {
		t.Fatalf("check after the connection ended = %s, %v; want corrupted", state, err)
	}
}

func TestStatfsIsBoundedAndSharesTheAccountOfStuckProbes(t *testing.T) {
	dir := unansweredFUSE(t)
	if _, err := Statfs(dir, 100*time.Millisecond); !errors.Is(err, ErrNotAnswering) {
		t.Fatalf("statfs: %v, want ErrNotAnswering", err)
	}
	if !Stuck(dir) {
		t.Fatal("the timed-out statfs is not counted as stuck")
	}
	start := time.Now()
	if _, err := Stat(dir, time.Second); !errors.Is(err, ErrNotAnswering) {
		t.Fatalf("stat after a stuck statfs: %v, want ErrNotAnswering", err)
	}
	if took := time.Since(start); took > 50*time.Millisecond {
		t.Fatalf("stat after a stuck statfs took %s, want an answer at once", took)
	}
	live := t.TempDir()
	st, err := Statfs(live, time.Second)
	if err != nil || st.Blocks == 0 {
		t.Fatalf("statfs of %s = %+v, %v; want its usage", live, st, err)
	}
}
