package mount

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ProbeTimeout is how long a stat through a mount may take before its filesystem counts as not
// answering. A FUSE server answers the stat of its root from memory: two seconds is far beyond a
// busy server's answer and well within kubelet's two-minute timeout of a CSI call.
const ProbeTimeout = 2 * time.Second

// maxStuckProbes bounds the probes of one path that may still be blocked in the kernel.
const maxStuckProbes = 1

// ErrNotAnswering is returned by Stat when the filesystem at the path did not answer in time.
var ErrNotAnswering = errors.New("the filesystem does not answer")

// stuck counts, per cleaned path, the probes that timed out and are still blocked in a stat. It
// is process-wide because what it accounts for is: goroutines (and their OS threads) of this
// process that a FUSE server holds in the kernel.
var stuck = struct {
	sync.Mutex
	paths map[string]int
}{paths: map[string]int{}}

// Stat stats path, waiting at most timeout.
//
// Problem: a stat through a FUSE mount whose server is stopped (SIGSTOP, a deadlock, a node
// under memory pressure) blocks in the kernel until the server answers, and no signal or
// context can end it; a caller that waits for it hangs, and a caller holding a lock hangs every
// other caller of that lock.
// Solution: the stat runs in its own goroutine and the caller returns ErrNotAnswering when the
// timeout passes, leaving the goroutine counted as stuck until the server answers or dies.
// While a path has maxStuckProbes stuck goroutines, Stat returns ErrNotAnswering at once without
// starting another (a stuck probe is itself the proof that the server does not answer). Probes
// still within their timeout are not counted: concurrent probes of a healthy mount all run.
// Invariant: Stat returns within timeout, and a dead server leaks at most maxStuckProbes
// goroutines per path beyond the probes in flight.
func Stat(path string, timeout time.Duration) (unix.Stat_t, error) {
	return probe(path, timeout, "stat", func() (unix.Stat_t, error) {
		var st unix.Stat_t
		err := unix.Stat(path, &st)
		return st, err
	})
}

// Statfs is Stat for statfs(2): the filesystem's usage, bounded by timeout, sharing Stat's
// account of probes stuck on path.
func Statfs(path string, timeout time.Duration) (unix.Statfs_t, error) {
	return probe(path, timeout, "statfs", func() (unix.Statfs_t, error) {
		var st unix.Statfs_t
		err := unix.Statfs(path, &st)
		return st, err
	})
}

// probe runs call, a system call through path, in its own goroutine and waits for it at most
// timeout; see Stat.
func probe[T any](path string, timeout time.Duration, op string, call func() (T, error)) (T, error) {
	var zero T
	path = filepath.Clean(path)
	stuck.Lock()
	if stuck.paths[path] >= maxStuckProbes {
		stuck.Unlock()
		return zero, fmt.Errorf("%s %s: %w (an earlier probe is still waiting for it)", op, path, ErrNotAnswering)
	}
	stuck.Unlock()

	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	// finished and abandoned are guarded by stuck's mutex: exactly one of "the call returned
	// in time" and "the caller gave up and counted the probe as stuck" happens first.
	var finished, abandoned bool
	go func() {
		var r result
		r.v, r.err = call()
		stuck.Lock()
		finished = true
		if abandoned {
			if stuck.paths[path]--; stuck.paths[path] <= 0 {
				delete(stuck.paths, path)
			}
		}
		stuck.Unlock()
		done <- r
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		stuck.Lock()
		if finished {
			stuck.Unlock()
			r := <-done
			return r.v, r.err
		}
		abandoned = true
		stuck.paths[path]++
		stuck.Unlock()
		return zero, fmt.Errorf("%s %s: %w within %s", op, path, ErrNotAnswering, timeout)
	}
}

// Stuck reports whether a probe of path timed out and is still blocked in the kernel: the
// filesystem there did not answer and still has not. It never touches path.
func Stuck(path string) bool {
	stuck.Lock()
	defer stuck.Unlock()
	return stuck.paths[filepath.Clean(path)] > 0
}

// stuckProbes returns the number of timed-out probes of path still blocked, for tests.
func stuckProbes(path string) int {
	stuck.Lock()
	defer stuck.Unlock()
	return stuck.paths[filepath.Clean(path)]
}

// Detach removes every mount at path lazily (umount2 MNT_DETACH): the mounts leave the mount
// table at once and the kernel frees them when their last user is gone.
//
// Problem: a bind of a FUSE mount whose server does not answer is busy for as long as any
// process (a workload, a probe of this process) is blocked in it, so a plain unmount fails with
// EBUSY until the server answers, which may be never.
// Solution: detach it; no path leads to it any more, and the blocked calls end when the server
// answers or dies.
// Invariant: callers detach only a mount whose probe timed out (Stat returned ErrNotAnswering);
// every other mount is removed with Unmount, which never detaches.
func Detach(path string) error {
	path = filepath.Clean(path)
	for range maxUnmountRounds {
		table, err := ReadTable()
		if err != nil {
			return err
		}
		if _, ok := table.Lookup(path); !ok {
			return nil
		}
		err = unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("detach %s: %w", path, err)
		}
	}
	return fmt.Errorf("detach %s: still mounted after %d attempts", path, maxUnmountRounds)
}
