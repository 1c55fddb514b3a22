package s3fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/testenv"
)

// TestAStoppedMountIsResumedUnderItsOpenFiles hands a mount over as a planned stop does: the
// first server stops with a file open for reading, a directory half listed and a file being
// written, and a second server resumes the connection from the first one's state file. The
// reader reads on, the listing continues where it was, the writer's file fails with ESTALE (its
// upload stayed with the first server) and never appears, a file replaced in the bucket while no
// server served answers ESTALE on the handle opened before (reading on would mix two versions),
// and new operations work.
func TestAStoppedMountIsResumedUnderItsOpenFiles(t *testing.T) {
	s := testenv.StartS3(t)
	content := pattern(8<<20, 3)
	putObject(t, s, "big.bin", content)
	putObject(t, s, "replaced.bin", pattern(32<<20, 5))
	const listed = 120
	for i := range listed {
		putObject(t, s, fmt.Sprintf("dir/%03d", i), []byte("x"))
	}
	state, err := memfd()
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	opts := baseOptions(s)
	cfg := Config{
		Options:     opts,
		Credentials: credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		Log:         logr.Discard(),
		State:       state,
	}
	requireFUSE(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	first, err := Mount(ctx, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The connection outlives the first server only if someone else holds it, as the node-agent
	// does.
	held, err := unix.FcntlInt(first.dev.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}

	reader, err := os.Open(filepath.Join(dir, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	got := make([]byte, len(content)/2)
	if _, err := io.ReadFull(reader, got); err != nil {
		t.Fatal(err)
	}
	lister, err := os.Open(filepath.Join(dir, "dir"))
	if err != nil {
		t.Fatal(err)
	}
	defer lister.Close()
	names, err := lister.Readdirnames(40)
	if err != nil {
		t.Fatal(err)
	}
	writer, err := os.Create(filepath.Join(dir, "written.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	if _, err := writer.Write([]byte("lost with the first server")); err != nil {
		t.Fatal(err)
	}

	replaced, err := os.Open(filepath.Join(dir, "replaced.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer replaced.Close()
	if _, err := replaced.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}

	first.Stop()
	if err := first.Wait(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Wait after Stop = %v, want ErrStopped", err)
	}
	putObject(t, s, "replaced.bin", pattern(32<<20, 7)) // while no server serves
	cfg.Resume = true
	second, err := MountFD(ctx, held, cfg)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Error(err)
		}
		_ = second.Wait()
	})

	rest, err := io.ReadAll(reader)
	if err != nil || !bytes.Equal(append(got, rest...), content) {
		t.Fatalf("the open file read on: %d bytes, %v; want the rest of the object", len(rest), err)
	}
	more, err := lister.Readdirnames(-1)
	if err != nil || len(names)+len(more) != listed {
		t.Fatalf("the listing went on with %d entries after %d (%v), want %d in all", len(more), len(names), err, listed)
	}
	// Far from what the kernel read ahead: the read reaches the server.
	if _, err := replaced.ReadAt(make([]byte, 4096), 30<<20); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("read of a handle whose object was replaced while no server served = %v, want ESTALE", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "replaced.bin")); err != nil || !bytes.Equal(b, pattern(32<<20, 7)) {
		t.Fatalf("a new open of the replaced object: %d bytes, %v; want its new content", len(b), err)
	}
	if _, err := writer.Write([]byte("more")); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("write of the file the first server was uploading = %v, want ESTALE", err)
	}
	if err := writer.Close(); !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("close of the file the first server was uploading = %v, want ESTALE", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "written.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat of the lost file = %v, want it absent", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "after.txt"), []byte("after"), 0o644); err != nil {
		t.Fatalf("a new file after the handover: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "after.txt")); err != nil || string(b) != "after" {
		t.Fatalf("reading the new file: %q, %v", b, err)
	}
}

func memfd() (*os.File, error) {
	fd, err := unix.MemfdCreate("s3fs-state", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "s3fs-state"), nil
}
