package s3fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
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

// TestAResumeRestoresFiftyThousandNodeIDsBehindASlowEndpoint resumes a connection whose kernel
// holds 50,000 node ids (50 directories of 1,000 files, each stat'ed through the mount) with
// 5 ms added to every S3 request while the second server restores them: a replay that looks the
// ids up one at a time needs 250 s at least, a resume must finish in a quarter of that. Every
// file then opens through the dentry the kernel kept, so an id the replay left stale fails with
// ESTALE.
func TestAResumeRestoresFiftyThousandNodeIDsBehindASlowEndpoint(t *testing.T) {
	const (
		dirs    = 50
		perDir  = 1000
		files   = dirs * perDir
		latency = 5 * time.Millisecond
		workers = 64
	)
	name := func(i int) string { return fmt.Sprintf("d%02d/f%04d", i/perDir, i%perDir) }
	s := testenv.StartS3(t)
	began := time.Now()
	putMany(t, s, files, workers, name)
	t.Logf("put %d objects in %v", files, time.Since(began).Round(time.Millisecond))

	var slow atomic.Bool
	var heads atomic.Int64
	endpoint := proxyEndpoint(t, s.Endpoint, func(r *http.Request) {
		if slow.Load() {
			if r.Method == http.MethodHead {
				heads.Add(1)
			}
			time.Sleep(latency)
		}
	})
	state, err := memfd()
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	opts := baseOptions(s)
	opts.EndpointURL = endpoint
	// The kernel keeps every dentry for the whole test, so the opens after the resume reach the
	// node ids the replay restored instead of looking the names up again.
	opts.MetadataTTL = &mountargs.TTL{Duration: 10 * time.Minute}
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
	held, err := unix.FcntlInt(first.dev.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	forEach(t, files, workers, func(i int) error {
		var st unix.Stat_t
		return unix.Stat(filepath.Join(dir, name(i)), &st)
	})
	t.Logf("stat'ed %d files through the mount in %v", files, time.Since(began).Round(time.Millisecond))
	first.Stop()
	if err := first.Wait(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Wait after Stop = %v, want ErrStopped", err)
	}

	slow.Store(true)
	cfg.Resume = true
	began = time.Now()
	second, err := MountFD(ctx, held, cfg)
	took := time.Since(began)
	slow.Store(false)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Error(err)
		}
		_ = second.Wait()
	})
	t.Logf("resumed with %d HEADs behind %v of latency in %v", heads.Load(), latency, took.Round(time.Millisecond))
	if heads.Load() < files {
		t.Errorf("the resume sent %d HEADs, want one per file at least (%d): the kernel did not hold every node id", heads.Load(), files)
	}
	if serial := files * latency; took > serial/4 {
		t.Errorf("the resume took %v, want under %v (a quarter of looking every id up in turn)", took, serial/4)
	}
	forEach(t, files, workers, func(i int) error {
		fd, err := unix.Open(filepath.Join(dir, name(i)), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
}

// putMany puts n one-byte objects named name(i) with the given number of requests in flight.
func putMany(t *testing.T, s *testenv.S3, n, workers int, name func(int) string) {
	t.Helper()
	transport := &http.Transport{MaxIdleConnsPerHost: workers}
	defer transport.CloseIdleConnections()
	client := s3.New(s.RootClient().Options(), func(o *s3.Options) { o.HTTPClient = &http.Client{Transport: transport} })
	forEach(t, n, workers, func(i int) error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.Bucket), Key: aws.String(name(i)), Body: bytes.NewReader([]byte("x")),
		})
		return err
	})
}

// forEach calls f(i) for every i below n from the given number of goroutines and fails the test
// with the first error.
func forEach(t *testing.T, n, workers int, f func(i int) error) {
	t.Helper()
	var g errgroup.Group
	g.SetLimit(workers)
	for i := range n {
		g.Go(func() error {
			if err := f(i); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
