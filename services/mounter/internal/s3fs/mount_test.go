package s3fs

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/go-logr/logr"
	"go.uber.org/goleak"

	"github.com/s3csi/s3csi/shared/mountargs"
	"github.com/s3csi/s3csi/shared/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the SDK's transport outlive a mount.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// requireFUSE fails the test when FUSE mounts are impossible here.
func requireFUSE(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("FUSE tests mount filesystems: run them as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("FUSE tests need /dev/fuse (modprobe fuse): %v", err)
	}
}

// baseOptions returns options that reach the test's S3 server.
func baseOptions(s *testenv.S3) mountargs.Options {
	return mountargs.Options{
		Bucket: s.Bucket, EndpointURL: s.Endpoint, Region: s.Region, ForcePathStyle: true,
	}
}

// mountFS mounts s's bucket in a temporary directory; it is unmounted (lazily if busy) when the
// test ends, so a failing test never leaves a mount behind.
func mountFS(t testing.TB, s *testenv.S3, opts mountargs.Options, timeout time.Duration) (string, *Mounted) {
	t.Helper()
	requireFUSE(t)
	dir := t.TempDir()
	cfg := Config{
		Options:        opts,
		Credentials:    credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		Log:            logr.Discard(),
		RequestTimeout: timeout,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := Mount(ctx, dir, cfg)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() { unmountFS(t, dir, m) })
	return dir, m
}

func unmountFS(t testing.TB, dir string, m *Mounted) {
	if err := m.Unmount(); err != nil {
		t.Errorf("unmount %s: %v", dir, err)
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	done := make(chan struct{})
	go func() {
		m.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("mount %s still served 30s after unmount", dir)
	}
}

// putObject writes an object with the root client.
func putObject(t testing.TB, s *testenv.S3, key string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := putBytes(ctx, s, key, body); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// errnoOf extracts the errno of a failed file operation.
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return 0
}
