package s3fs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// bucketHas checks an object's content in the bucket, or its absence when want is nil.
func bucketHas(t *testing.T, s *testenv.S3, key string, want []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, ok, err := getBytes(ctx, s, key)
	switch {
	case err != nil:
		t.Fatalf("get %s: %v", key, err)
	case want == nil && ok:
		t.Fatalf("object %s exists, want none", key)
	case want != nil && !ok:
		t.Fatalf("object %s missing", key)
	case want != nil && !bytes.Equal(got, want) && len(got)+len(want) > 512:
		t.Fatalf("object %s holds %d bytes, want %d others", key, len(got), len(want))
	case want != nil && !bytes.Equal(got, want):
		t.Fatalf("object %s = %q, want %q", key, got, want)
	}
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if got := errnoOf(err); got != want {
		t.Fatalf("%s: error %v (errno %d), want %v", what, err, got, want)
	}
}

func TestSemantics(t *testing.T) {
	s := testenv.StartS3(t)
	for key, body := range map[string]string{
		"a/b.txt": "hello", "a/c/d.txt": "deep", "a.txt": "sorts between",
		"marker/": "", "root.txt": "root", "data/keep.txt": "keep",
	} {
		putObject(t, s, key, []byte(body))
	}
	opts := baseOptions(s)
	opts.AllowDelete, opts.AllowOverwrite = true, true
	dir, _ := mountFS(t, s, opts, 10*time.Second)
	defOpts := baseOptions(s)
	defOpts.MetadataTTL = &mountargs.TTL{Duration: 0}
	defDir, _ := mountFS(t, s, defOpts, 10*time.Second)

	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"an object reads back its content", func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, "a/b.txt"))
			if err != nil || string(b) != "hello" {
				t.Fatalf("read = %q, %v", b, err)
			}
		}},
		{"a missing name is ENOENT", func(t *testing.T) {
			_, err := os.Stat(filepath.Join(dir, "nope"))
			wantErrno(t, "stat", err, syscall.ENOENT)
		}},
		{"a directory lists common prefixes and objects, and hides directory markers", func(t *testing.T) {
			names := readNames(t, dir)
			want := []string{"a", "a.txt", "data", "marker", "root.txt"}
			if !slices.Equal(names, want) {
				t.Fatalf("root lists %q, want %q", names, want)
			}
			if names := readNames(t, filepath.Join(dir, "marker")); len(names) != 0 {
				t.Fatalf("marker/ lists %q, want nothing", names)
			}
		}},
		{"a new file appears in the bucket when it is closed", func(t *testing.T) {
			f, err := os.Create(filepath.Join(dir, "new.txt"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("fresh"); err != nil {
				t.Fatal(err)
			}
			bucketHas(t, s, "new.txt", nil)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			bucketHas(t, s, "new.txt", []byte("fresh"))
			head, err := s.RootClient().HeadObject(context.Background(), &s3.HeadObjectInput{
				Bucket: aws.String(s.Bucket), Key: aws.String("new.txt"), ChecksumMode: types.ChecksumModeEnabled,
			})
			if err != nil || aws.ToString(head.ChecksumCRC32C) == "" {
				t.Fatalf("new object has no CRC32C checksum (--upload-checksums defaults to crc32c): %v", err)
			}
		}},
		{"an empty new file is in the bucket once it is released", func(t *testing.T) {
			// Its close does not store it (a shell closes the descriptor it duplicated onto
			// stdout before the command writes); the release after the last close does.
			if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "the empty object", func() bool {
				_, ok, err := getBytes(t.Context(), s, "empty")
				return err == nil && ok
			})
			bucketHas(t, s, "empty", []byte{})
		}},
		{"a write that is not sequential fails with EINVAL", func(t *testing.T) {
			f, err := os.Create(filepath.Join(dir, "seq.txt"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("x"), 10)
			wantErrno(t, "pwrite at 10", err, syscall.EINVAL)
		}},
		{"overwrite with O_TRUNC replaces the object when allowed", func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "root.txt"), []byte("replaced"), 0o644); err != nil {
				t.Fatal(err)
			}
			bucketHas(t, s, "root.txt", []byte("replaced"))
		}},
		{"overwrite is refused with EPERM without --allow-overwrite", func(t *testing.T) {
			err := os.WriteFile(filepath.Join(defDir, "data/keep.txt"), []byte("no"), 0o644)
			wantErrno(t, "overwrite", err, syscall.EPERM)
			bucketHas(t, s, "data/keep.txt", []byte("keep"))
		}},
		{"append is refused with EPERM", func(t *testing.T) {
			_, err := os.OpenFile(filepath.Join(dir, "a/b.txt"), os.O_WRONLY|os.O_APPEND, 0)
			wantErrno(t, "open O_APPEND", err, syscall.EPERM)
		}},
		{"delete removes the object when allowed", func(t *testing.T) {
			putObject(t, s, "gone.txt", []byte("bye"))
			if err := os.Remove(filepath.Join(dir, "gone.txt")); err != nil {
				t.Fatal(err)
			}
			bucketHas(t, s, "gone.txt", nil)
		}},
		{"delete is refused with EPERM without --allow-delete", func(t *testing.T) {
			err := os.Remove(filepath.Join(defDir, "data/keep.txt"))
			wantErrno(t, "unlink", err, syscall.EPERM)
			bucketHas(t, s, "data/keep.txt", []byte("keep"))
		}},
		{"rename, symlinks and hard links fail", func(t *testing.T) {
			wantErrno(t, "rename", os.Rename(filepath.Join(dir, "a/b.txt"), filepath.Join(dir, "a/z.txt")), syscall.ENOSYS)
			wantErrno(t, "symlink", os.Symlink("a/b.txt", filepath.Join(dir, "link")), syscall.ENOSYS)
			// The kernel itself may refuse the link (protected_hardlinks) before asking the filesystem.
			if errno := errnoOf(os.Link(filepath.Join(dir, "a/b.txt"), filepath.Join(dir, "hard"))); errno != syscall.ENOSYS && errno != syscall.EPERM {
				t.Fatalf("link: errno %v, want ENOSYS or EPERM", errno)
			}
		}},
		{"chmod and chown fail with EPERM", func(t *testing.T) {
			wantErrno(t, "chmod", os.Chmod(filepath.Join(dir, "a/b.txt"), 0o600), syscall.EPERM)
			wantErrno(t, "chown", os.Chown(filepath.Join(dir, "a/b.txt"), 1, 1), syscall.EPERM)
		}},
		{"mkdir makes a local directory that becomes remote once a file is written in it", func(t *testing.T) {
			sub := filepath.Join(dir, "made")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(readNames(t, dir), "made") {
				t.Fatal("local directory not listed")
			}
			if err := os.WriteFile(filepath.Join(sub, "f"), []byte("in"), 0o644); err != nil {
				t.Fatal(err)
			}
			bucketHas(t, s, "made/f", []byte("in"))
			wantErrno(t, "rmdir non-empty", os.Remove(sub), syscall.ENOTEMPTY)
		}},
		{"rmdir removes an empty local directory", func(t *testing.T) {
			sub := filepath.Join(dir, "tmpdir")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(sub); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(sub); !os.IsNotExist(err) {
				t.Fatalf("stat after rmdir: %v", err)
			}
		}},
		{"a file being written cannot be opened for reading", func(t *testing.T) {
			f, err := os.Create(filepath.Join(dir, "busy.txt"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, err = os.Open(filepath.Join(dir, "busy.txt"))
			wantErrno(t, "open for read while writing", err, syscall.EPERM)
		}},
		{"an object created by another client is visible at once", func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(defDir, "later.txt")); err == nil {
				t.Fatal("later.txt exists before it was put")
			}
			putObject(t, s, "later.txt", []byte("now"))
			b, err := os.ReadFile(filepath.Join(defDir, "later.txt"))
			if err != nil || string(b) != "now" {
				t.Fatalf("read = %q, %v", b, err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}

func TestPrefixAndReadOnly(t *testing.T) {
	s := testenv.StartS3(t)
	putObject(t, s, "team/x.txt", []byte("x"))
	putObject(t, s, "other.txt", []byte("o"))
	opts := baseOptions(s)
	opts.Prefix, opts.ReadOnly = "team/", true
	dir, _ := mountFS(t, s, opts, 10*time.Second)

	if names := readNames(t, dir); !slices.Equal(names, []string{"x.txt"}) {
		t.Fatalf("prefix view lists %q, want [x.txt]", names)
	}
	// Every call that would change the bucket is refused with EROFS (scenario S11), the existing
	// object's included, and the bucket is unchanged.
	x := filepath.Join(dir, "x.txt")
	wantErrno(t, "create", os.WriteFile(filepath.Join(dir, "y.txt"), []byte("y"), 0o644), syscall.EROFS)
	wantErrno(t, "mkdir", os.Mkdir(filepath.Join(dir, "d"), 0o755), syscall.EROFS)
	wantErrno(t, "unlink", os.Remove(x), syscall.EROFS)
	_, err := os.OpenFile(x, os.O_WRONLY, 0)
	wantErrno(t, "open for writing", err, syscall.EROFS)
	_, err = os.OpenFile(x, os.O_RDWR|os.O_TRUNC, 0)
	wantErrno(t, "open with O_TRUNC", err, syscall.EROFS)
	wantErrno(t, "truncate", os.Truncate(x, 0), syscall.EROFS)
	wantErrno(t, "rename", os.Rename(x, filepath.Join(dir, "z.txt")), syscall.EROFS)
	wantErrno(t, "chmod", os.Chmod(x, 0o600), syscall.EROFS)
	wantErrno(t, "symlink", os.Symlink("x.txt", filepath.Join(dir, "l")), syscall.EROFS)
	bucketHas(t, s, "team/x.txt", []byte("x"))
	bucketHas(t, s, "other.txt", []byte("o"))
	for _, key := range []string{"team/y.txt", "team/d/", "team/z.txt", "team/l"} {
		bucketHas(t, s, key, nil)
	}
	if names := readNames(t, dir); !slices.Equal(names, []string{"x.txt"}) {
		t.Fatalf("after the refused calls the prefix view lists %q, want [x.txt]", names)
	}
}

func readNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("readdir %s: %v", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func TestMetadataTTL(t *testing.T) {
	s := testenv.StartS3(t)
	putObject(t, s, "cached.txt", []byte("v1"))
	opts := baseOptions(s)
	opts.MetadataTTL = &mountargs.TTL{Duration: time.Minute}
	dir, _ := mountFS(t, s, opts, 10*time.Second)
	path := filepath.Join(dir, "cached.txt")
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RootClient().DeleteObject(context.Background(), &s3.DeleteObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("cached.txt"),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stat within the metadata TTL: %v, want the cached entry", err)
	}
	_, err := os.Open(path)
	wantErrno(t, "open re-reads metadata", err, syscall.ENOENT)
}
