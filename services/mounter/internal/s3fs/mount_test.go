package s3fs

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/go-logr/logr"
	"go.uber.org/goleak"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
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
		if err := m.Wait(); err != nil {
			t.Errorf("serve %s: %v", dir, err)
		}
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

// A mount whose keys S3 refuses, or whose bucket does not exist, fails with the reason instead of
// serving a filesystem where every request fails; nothing stays mounted.
func TestMountRefusesKeysS3RefusesAndAMissingBucket(t *testing.T) {
	requireFUSE(t)
	s := testenv.StartS3(t)
	const wrongSecret = "wrongSecretKeyWrongSecretKeyWrongSecret0"
	for name, tt := range map[string]struct {
		secret, bucket, want string
	}{
		"wrong secret key": {secret: wrongSecret, bucket: s.Bucket, want: "S3 refused to list bucket"},
		"missing bucket":   {secret: s.SecretKey, bucket: "no-such-bucket-here", want: `bucket "no-such-bucket-here" does not exist`},
	} {
		t.Run(name, func(t *testing.T) {
			opts := baseOptions(s)
			opts.Bucket = tt.bucket
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m, err := Mount(ctx, dir, Config{
				Options:        opts,
				Credentials:    credentials.NewStaticCredentialsProvider(s.AccessKey, tt.secret, ""),
				Log:            logr.Discard(),
				RequestTimeout: 10 * time.Second,
			})
			if err == nil {
				unmountFS(t, dir, m)
				t.Fatal("mount succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("mount error = %q, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), wrongSecret) {
				t.Errorf("the mount error shows the secret key: %q", err)
			}
			var st syscall.Statfs_t
			if err := syscall.Statfs(dir, &st); err != nil || st.Type == 0x65735546 { // FUSE_SUPER_MAGIC
				t.Errorf("the mount point is left as a FUSE mount (%v)", err)
			}
		})
	}
}
