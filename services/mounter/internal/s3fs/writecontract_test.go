package s3fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/testenv"
)

// shell runs script with sh in dir and returns its output; a script still running after a
// minute fails the test (the write path must never hang).
func shell(t *testing.T, dir, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s: still running after a minute (killed); output: %s", script, out)
	}
	return string(out), err
}

// TestAChildsCloseDoesNotEndItsParentsFile runs shell patterns in which a child process that
// inherited the descriptor exits (and so closes it) before the opener is done: only the opener's
// close completes the file.
func TestAChildsCloseDoesNotEndItsParentsFile(t *testing.T) {
	s := testenv.StartS3(t)
	dir, _ := mountFS(t, s, baseOptions(s), 10*time.Second)
	putObject(t, s, "a.txt", []byte("first\n"))
	putObject(t, s, "b.txt", []byte("second\n"))
	tests := []struct {
		key, script, want string
	}{
		{"children.txt", `sh -c 'echo a; /bin/echo b; echo c' > children.txt`, "a\nb\nc\n"},
		{"child-first.txt", `sh -c '/bin/echo b; echo c' > child-first.txt`, "b\nc\n"},
		{"all.txt", `for f in a.txt b.txt; do cat "$f"; done > all.txt`, "first\nsecond\n"},
		{"group.txt", `{ echo a; /bin/true; echo b; } > group.txt`, "a\nb\n"},
		{"subshell.txt", `( echo a; /bin/echo b; echo c ) > subshell.txt`, "a\nb\nc\n"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if out, err := shell(t, dir, tt.script); err != nil {
				t.Fatalf("%s: %v: %s", tt.script, err, out)
			}
			got, err := os.ReadFile(filepath.Join(dir, tt.key))
			if err != nil || string(got) != tt.want {
				t.Fatalf("%s: read back %q, %v; want %q", tt.script, got, err, tt.want)
			}
			bucketHas(t, s, tt.key, []byte(tt.want))
		})
	}
}

// TestManyFilesOpenForWritingAreAllStored holds more files open for writing than the memory
// target has parts for, as awk does with one output per key: every file is stored, nothing
// waits.
func TestManyFilesOpenForWritingAreAllStored(t *testing.T) {
	s := testenv.StartS3(t)
	opts := baseOptions(s)
	opts.MaxMemoryTarget = ptr[uint64](64) // 8 parts of 8 MiB
	dir, _ := mountFS(t, s, opts, 10*time.Second)
	var input strings.Builder
	for i := range 100 {
		fmt.Fprintf(&input, "k%d line-%d\n", i, i)
	}
	for i := range 100 {
		fmt.Fprintf(&input, "k%d again-%d\n", i, i)
	}
	in := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(in, []byte(input.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := shell(t, dir, `awk '{print $2 > ($1".txt")}' `+in); err != nil {
		t.Fatalf("awk: %v: %s", err, out)
	}
	for _, i := range []int{0, 64, 99} {
		bucketHas(t, s, fmt.Sprintf("k%d.txt", i), fmt.Appendf(nil, "line-%d\nagain-%d\n", i, i))
	}
	if n := len(bucketKeys(t, s)); n != 100 {
		t.Fatalf("bucket holds %d objects, want 100", n)
	}
}

// TestAFileThatFindsNoMemoryFailsWithENOMEM fills the memory target with a file's parts that
// cannot be uploaded yet, then writes another: it fails with ENOMEM within the request timeout
// instead of waiting for ever, and is not stored.
func TestAFileThatFindsNoMemoryFailsWithENOMEM(t *testing.T) {
	s := testenv.StartS3(t)
	opts := baseOptions(s)
	opts.MaxMemoryTarget = ptr[uint64](16)
	opts.WritePartSize = ptr[uint64](8 << 20)
	dir, _ := mountFS(t, s, opts, 2*time.Second)
	// Two files each holding a part-sized buffer not yet full take the whole target.
	var open []*os.File
	for i := range 2 {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("big-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(make([]byte, 5<<20)); err != nil {
			t.Fatalf("write big-%d: %v", i, err)
		}
		open = append(open, f)
	}
	f, err := os.Create(filepath.Join(dir, "starved"))
	if err != nil {
		t.Fatal(err)
	}
	_, werr := f.Write([]byte("x"))
	cerr := f.Close()
	wantErrno(t, "write with no memory left", werr, syscall.ENOMEM)
	wantErrno(t, "close of the file that found no memory", cerr, syscall.ENOMEM)
	for _, f := range open {
		if err := f.Close(); err != nil {
			t.Fatalf("close %s: %v", f.Name(), err)
		}
	}
	bucketHas(t, s, "starved", nil)
	bucketHas(t, s, "big-0", make([]byte, 5<<20))
}

// TestAFailedWriteLeavesTheObjectAsItWas writes out of order over an existing object: the
// write fails with EINVAL, every later write and the close fail too, and the bucket keeps the
// previous version.
func TestAFailedWriteLeavesTheObjectAsItWas(t *testing.T) {
	s := testenv.StartS3(t)
	opts := baseOptions(s)
	opts.AllowOverwrite = true
	dir, _ := mountFS(t, s, opts, 10*time.Second)
	good := pattern(3<<20, 7)
	putObject(t, s, "good.bin", good)

	t.Run("a write past the end", func(t *testing.T) {
		f, err := os.OpenFile(filepath.Join(dir, "good.bin"), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(pattern(100<<10, 1)); err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteAt([]byte("hole"), 1<<20)
		wantErrno(t, "write after a hole", err, syscall.EINVAL)
		_, err = f.Write([]byte("more"))
		wantErrno(t, "write after the failed one", err, syscall.EINVAL)
		wantErrno(t, "close", f.Close(), syscall.EINVAL)
		bucketHas(t, s, "good.bin", good)
	})
	t.Run("cp of a sparse file", func(t *testing.T) {
		sparse := filepath.Join(t.TempDir(), "sparse")
		if out, err := shell(t, dir, "head -c 102400 /dev/urandom > "+sparse+" && truncate -s 20M "+sparse+
			" && printf end >> "+sparse); err != nil {
			t.Fatalf("make the sparse file: %v: %s", err, out)
		}
		out, err := shell(t, dir, "cp --sparse=always "+sparse+" good.bin")
		if err == nil {
			t.Fatalf("cp of a sparse file succeeded, want it to fail (writes must be sequential): %s", out)
		}
		bucketHas(t, s, "good.bin", good)
	})
	t.Run("a truncation to another size", func(t *testing.T) {
		f, err := os.OpenFile(filepath.Join(dir, "good.bin"), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write([]byte("short")); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "truncate while writing", f.Truncate(1<<20), syscall.EPERM)
		wantErrno(t, "close", f.Close(), syscall.EPERM)
		bucketHas(t, s, "good.bin", good)
	})
	got, err := os.ReadFile(filepath.Join(dir, "good.bin"))
	if err != nil || !bytes.Equal(got, good) {
		t.Fatalf("read back after failed overwrites: %d bytes, %v; want the %d previous ones", len(got), err, len(good))
	}
}

// TestAFileClosedByAnotherThreadIsReadableAtOnce closes a file on another thread of the opener
// and opens it again at once: the open waits for the release's upload instead of failing.
func TestAFileClosedByAnotherThreadIsReadableAtOnce(t *testing.T) {
	s := testenv.StartS3(t)
	dir, _ := mountFS(t, s, baseOptions(s), 10*time.Second)
	out, err := shell(t, dir, `python3 - <<'EOF'
import threading
f = open("threaded.txt", "w")
f.write("from the opener\n")
f.flush()
t = threading.Thread(target=f.close)
t.start()
t.join()
print(open("threaded.txt").read(), end="")
EOF`)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || strings.Contains(out, "python3: not found") {
			t.Fatalf("python3 is missing: install it (apt-get install python3, or `make test-deps`): %s", out)
		}
		t.Fatalf("python: %v: %s", err, out)
	}
	if out != "from the opener\n" {
		t.Fatalf("read back %q", out)
	}
	bucketHas(t, s, "threaded.txt", []byte("from the opener\n"))
}

// killWriterMidFile starts dd writing 100 MiB to name on the mount, SIGKILLs it once more than
// 8 MiB are written, and returns when it has exited.
func killWriterMidFile(t *testing.T, dir, name string) {
	t.Helper()
	cmd := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(dir, name), "bs=1M", "count=100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	testenv.Eventually(t, time.Minute, "dd to write 8 MiB", func() bool {
		st, err := os.Stat(filepath.Join(dir, name))
		return err == nil && st.Size() > 8<<20 && st.Size() < 100<<20
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Logf("dd ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("dd did not exit within a minute of SIGKILL")
	}
}

// TestAWriterKilledMidFile kills a writer in the middle of a 100 MiB file over an existing
// object. By default the kernel's close of the killed process's descriptor is the opener's
// close, and the bytes written so far replace the object (a documented limit); with
// --abort-on-signal the file fails and the object keeps its previous version.
func TestAWriterKilledMidFile(t *testing.T) {
	s := testenv.StartS3(t)
	previous := []byte("the previous version\n")
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprintf("abort-on-signal=%v", abort), func(t *testing.T) {
			opts := baseOptions(s)
			opts.AllowOverwrite = true
			opts.AbortOnSignal = abort
			dir, _ := mountFS(t, s, opts, 10*time.Second)
			key := fmt.Sprintf("killed-%v.bin", abort)
			putObject(t, s, key, previous)
			killWriterMidFile(t, dir, key)
			testenv.Eventually(t, 30*time.Second, "no upload of the killed file in flight", func() bool {
				return !slices.Contains(pendingUploads(t, s), key) && writerGone(dir, key)
			})
			got, ok, err := getBytes(t.Context(), s, key)
			switch {
			case err != nil || !ok:
				t.Fatalf("get %s: %v (exists: %v)", key, err, ok)
			case abort && !bytes.Equal(got, previous):
				t.Fatalf("with --abort-on-signal the object holds %d bytes, want the %d of the previous version", len(got), len(previous))
			case !abort && (len(got) <= 8<<20 || len(got) >= 100<<20 || !bytes.Equal(got, make([]byte, len(got)))):
				t.Fatalf("the killed writer's file holds %d bytes, want the zeros written before the kill (8 to 100 MiB)", len(got))
			}
		})
	}
}

// writerGone reports whether the mount no longer writes name: an open for reading succeeds.
func writerGone(dir, name string) bool {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}
