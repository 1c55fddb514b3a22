package s3fs

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// keysUnder lists the bucket's keys that start with prefix.
func keysUnder(t *testing.T, s *testenv.S3, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.RootClient().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatalf("list %s: %v", prefix, err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// run runs a program and fails the test with its output when it fails.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
}

// Files opened for writing with O_SYNC or O_DSYNC are refused with EINVAL, as mount-s3 does: the
// kernel's fsync after every write would complete the upload after the first one.
func TestSyncWritesAreRefused(t *testing.T) {
	s := testenv.StartS3(t)
	putObject(t, s, "old.txt", []byte("old"))
	opts := baseOptions(s)
	opts.AllowOverwrite = true
	dir, _ := mountFS(t, s, opts, 30*time.Second)

	out, err := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(dir, "dsync.bin"), "bs=1M", "count=3", "oflag=dsync").CombinedOutput()
	if err == nil {
		t.Errorf("dd oflag=dsync succeeded, want it refused:\n%s", out)
	}
	bucketHas(t, s, "dsync.bin", nil)
	for _, tc := range []struct {
		name  string
		path  string
		flags int
	}{
		{"a new file with O_SYNC", "new-sync.txt", os.O_WRONLY | os.O_CREATE | os.O_SYNC},
		{"a new file with O_DSYNC", "new-dsync.txt", os.O_WRONLY | os.O_CREATE | syscall.O_DSYNC},
		{"an overwrite with O_SYNC", "old.txt", os.O_WRONLY | os.O_TRUNC | os.O_SYNC},
		{"an overwrite with O_DSYNC through O_RDWR", "old.txt", os.O_RDWR | os.O_TRUNC | syscall.O_DSYNC},
	} {
		f, err := os.OpenFile(filepath.Join(dir, tc.path), tc.flags, 0o644)
		if err == nil {
			f.Close()
		}
		wantErrno(t, tc.name, err, syscall.EINVAL)
	}
	bucketHas(t, s, "new-sync.txt", nil)
	bucketHas(t, s, "new-dsync.txt", nil)
	bucketHas(t, s, "old.txt", []byte("old"))
	f, err := os.OpenFile(filepath.Join(dir, "old.txt"), os.O_RDONLY|os.O_SYNC, 0)
	if err != nil {
		t.Fatalf("open O_RDONLY|O_SYNC: %v, want a reader", err)
	}
	f.Close()
}

// allBytes reports whether b is n bytes of c.
func allBytes(b []byte, c byte, n int) bool {
	return len(b) == n && bytes.Count(b, []byte{c}) == n
}

// openAndRead opens path and reads n bytes of c from its start.
func openAndRead(t *testing.T, path string, c byte, n int) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil || !allBytes(b, c, n) {
		t.Fatalf("first read of %s: %v", path, err)
	}
	return f
}

// A handle opened before another client replaced the object never reads bytes of the new
// version, nor an end of file at another length than its own, while a handle opened afterwards
// on the same mount reads the new version, whichever is larger. Bytes of the old version that the
// mount no longer holds cannot be fetched again (S3 has only the new one): their read fails with
// EIO.
func TestAHandleReadsOnlyTheVersionItOpened(t *testing.T) {
	s := testenv.StartS3(t)
	dir, _ := mountFS(t, s, baseOptions(s), 30*time.Second)
	const v1Size, part = 3 << 20, 1 << 20
	for _, tc := range []struct {
		name, key string
		v2Size    int
	}{
		{"the new version is smaller", "smaller.bin", 1<<20 + 7},
		{"the new version is larger", "larger.bin", 5<<20 + 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.key)
			putObject(t, s, tc.key, bytes.Repeat([]byte("a"), v1Size))
			partly := openAndRead(t, path, 'a', part)
			whole := openAndRead(t, path, 'a', v1Size) // the kernel's page cache now holds all of v1

			putObject(t, s, tc.key, bytes.Repeat([]byte("b"), tc.v2Size))
			if got := readWhole(t, path); !allBytes(got, 'b', tc.v2Size) {
				t.Fatalf("a handle opened after the replacement read %d bytes (%d of v2), want all %d of v2",
					len(got), bytes.Count(got, []byte("b")), tc.v2Size)
			}
			rest, err := io.ReadAll(partly)
			if err != nil {
				t.Fatalf("the rest of a handle of v1, read after v2 was read: %v", err)
			}
			if n := part + len(rest); n != v1Size || !allBytes(rest, 'a', len(rest)) {
				t.Fatalf("a handle of v1 read %d bytes, the rest with %d of v2; want all %d of v1",
					n, bytes.Count(rest, []byte("b")), v1Size)
			}
			again := make([]byte, v1Size+1)
			if n, err := whole.ReadAt(again, 0); n != v1Size || err != io.EOF || !allBytes(again[:n], 'a', v1Size) {
				t.Fatalf("rereading a handle of v1 from its start: %d bytes (%d of v1), %v; want %d of v1 and EOF",
					n, bytes.Count(again[:n], []byte("a")), err, v1Size)
			}
			partly.Close()
			whole.Close()
			if got := readWhole(t, path); !allBytes(got, 'b', tc.v2Size) {
				t.Fatalf("an open after the v1 handles closed read %d bytes (%d of v2), want all %d of v2",
					len(got), bytes.Count(got, []byte("b")), tc.v2Size)
			}
		})
	}
	t.Run("bytes of the old version the mount does not hold fail with EIO", func(t *testing.T) {
		path := filepath.Join(dir, "uncached.bin")
		putObject(t, s, "uncached.bin", bytes.Repeat([]byte("a"), v1Size))
		partly := openAndRead(t, path, 'a', 4096)
		putObject(t, s, "uncached.bin", bytes.Repeat([]byte("b"), v1Size))
		if got := readWhole(t, path); !allBytes(got, 'b', v1Size) {
			t.Fatalf("a handle opened after the replacement read %d bytes of v2, want %d", bytes.Count(got, []byte("b")), v1Size)
		}
		rest, err := io.ReadAll(partly)
		if bytes.Contains(rest, []byte("b")) {
			t.Fatalf("a handle of v1 read %d bytes of v2", bytes.Count(rest, []byte("b")))
		}
		if err == nil && 4096+len(rest) != v1Size {
			t.Fatalf("a handle of v1 ended after %d bytes without error, want %d", 4096+len(rest), v1Size)
		}
		if err != nil {
			wantErrno(t, "reading v1 bytes S3 no longer has", err, syscall.EIO)
		}
	})
}

// A new version larger than the size the kernel still caches for the file (its attributes are
// valid for the metadata TTL) is read whole: the kernel ends reads through its page cache at the
// size it caches.
func TestALargerVersionIsReadWholeWithinTheMetadataTTL(t *testing.T) {
	s := testenv.StartS3(t)
	putObject(t, s, "grown.bin", bytes.Repeat([]byte("a"), 1<<20))
	opts := baseOptions(s)
	opts.MetadataTTL = &mountargs.TTL{Duration: time.Minute}
	dir, _ := mountFS(t, s, opts, 30*time.Second)
	path := filepath.Join(dir, "grown.bin")
	if fi, err := os.Stat(path); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("stat: %v, %v", fi, err)
	}
	putObject(t, s, "grown.bin", bytes.Repeat([]byte("b"), 3<<20))
	if got := readWhole(t, path); !allBytes(got, 'b', 3<<20) {
		t.Fatalf("read %d bytes (%d of the new version), want all %d of it", len(got), bytes.Count(got, []byte("b")), 3<<20)
	}
	if got := readWhole(t, path); !allBytes(got, 'b', 3<<20) {
		t.Fatalf("reread %d bytes (%d of the new version), want all %d of it", len(got), bytes.Count(got, []byte("b")), 3<<20)
	}
}

// Opening a file for overwriting while it is open for reading on the mount fails with EPERM, as
// in mount-s3: the reader would otherwise get EIO, new bytes or an early end of file.
func TestAFileBeingReadIsNotOverwritten(t *testing.T) {
	s := testenv.StartS3(t)
	v1 := pattern(3<<20, 31)
	putObject(t, s, "read.bin", v1)
	opts := baseOptions(s)
	opts.AllowOverwrite = true
	dir, _ := mountFS(t, s, opts, 30*time.Second)
	path := filepath.Join(dir, "read.bin")

	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	head := make([]byte, 1<<20)
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatal(err)
	}
	for _, flags := range []int{os.O_WRONLY | os.O_TRUNC, os.O_RDWR | os.O_TRUNC, os.O_WRONLY} {
		f, err := os.OpenFile(path, flags, 0)
		if err == nil {
			f.Close()
		}
		wantErrno(t, "open for overwriting while a reader has the file open", err, syscall.EPERM)
	}
	if out, err := exec.Command("sh", "-c", "echo new > "+path).CombinedOutput(); err == nil {
		t.Fatalf("sh redirection overwrote a file being read: %s", out)
	}
	// O_RDWR without O_TRUNC is a reader.
	rw, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open O_RDWR without O_TRUNC: %v, want a reader", err)
	}
	rw.Close()
	rest, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(append(head, rest...), v1) {
		t.Fatalf("the reader read %d bytes (%v), want the %d it opened", len(head)+len(rest), err, len(v1))
	}
	bucketHas(t, s, "read.bin", v1)
	r.Close()
	if err := os.WriteFile(path, []byte("new"), 0o644); err != nil {
		t.Fatalf("overwrite once the reader closed: %v", err)
	}
	bucketHas(t, s, "read.bin", []byte("new"))

	// A handle that overwrote the file through O_RDWR reads no more: once its upload completed,
	// the file shows the new size and may be overwritten again while it is still open.
	rw, err = os.OpenFile(path, os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if _, err := rw.WriteString("newer"); err != nil {
		t.Fatal(err)
	}
	if err := rw.Sync(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 5 {
		t.Fatalf("stat after the O_RDWR overwrite completed: %v, %v; want size 5", fi, err)
	}
	if err := os.WriteFile(path, []byte("newest"), 0o644); err != nil {
		t.Fatalf("overwrite while a completed O_RDWR overwrite is open: %v", err)
	}
	bucketHas(t, s, "read.bin", []byte("newest"))
}

// rm -rf removes a tree that another client wrote after the mount listed it: rmdir asks S3, not
// the metadata cache, whether a directory is empty, and deletes a directory's marker object.
func TestRmRfRemovesATreeAnotherClientWrote(t *testing.T) {
	s := testenv.StartS3(t)
	putObject(t, s, "a/old.txt", []byte("old"))
	putObject(t, s, "locked/", nil)
	opts := baseOptions(s)
	opts.AllowDelete = true
	opts.MetadataTTL = &mountargs.TTL{Duration: time.Minute}
	dir, _ := mountFS(t, s, opts, 30*time.Second)
	if names := readNames(t, filepath.Join(dir, "a")); !slices.Equal(names, []string{"old.txt"}) {
		t.Fatalf("a lists %q", names)
	}
	for _, key := range []string{"a/", "a/b/", "a/b/c", "a/b/d/e.txt", "a/f.txt"} {
		var body []byte // a directory marker (key/) has no content
		if !strings.HasSuffix(key, "/") {
			body = []byte(key)
		}
		putObject(t, s, key, body)
	}
	run(t, "/bin/rm", "-rf", filepath.Join(dir, "a"))
	if keys := keysUnder(t, s, "a/"); len(keys) != 0 {
		t.Fatalf("after rm -rf the bucket holds %q", keys)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("stat after rm -rf: %v, want ENOENT", err)
	}

	// A directory with objects is not empty; one that is only its marker is.
	putObject(t, s, "full/x", []byte("x"))
	putObject(t, s, "marker/", nil)
	wantErrno(t, "rmdir of a directory with objects", os.Remove(filepath.Join(dir, "full")), syscall.ENOTEMPTY)
	if err := os.Remove(filepath.Join(dir, "marker")); err != nil {
		t.Fatalf("rmdir of a directory that is only its marker: %v", err)
	}
	bucketHas(t, s, "marker/", nil)
	bucketHas(t, s, "full/x", []byte("x"))

	// Without --allow-delete the marker stays, and so does the directory.
	noDelete, _ := mountFS(t, s, baseOptions(s), 30*time.Second)
	wantErrno(t, "rmdir of a marker without --allow-delete", os.Remove(filepath.Join(noDelete, "locked")), syscall.EPERM)
	bucketHas(t, s, "locked/", []byte{})
}

// --file-mode 000 and --dir-mode 000 show as mode 0, not as go-fuse's defaults.
func TestZeroModesStayZero(t *testing.T) {
	s := testenv.StartS3(t)
	putObject(t, s, "d/f.txt", []byte("f"))
	opts := baseOptions(s)
	opts.FileMode, opts.DirMode = ptr[uint32](0), ptr[uint32](0)
	dir, _ := mountFS(t, s, opts, 30*time.Second)
	for path, want := range map[string]os.FileMode{
		dir:                           os.ModeDir,
		filepath.Join(dir, "d"):       os.ModeDir,
		filepath.Join(dir, "d/f.txt"): 0,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode(), want)
		}
	}
}
