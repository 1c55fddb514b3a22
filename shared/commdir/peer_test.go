package commdir_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/commdir"
	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
	"github.com/s3csi/s3csi/shared/testenv/testfs"
)

// nobody is the uid the other-user mounter runs as in these tests.
const nobody = 65534

// mounterBin builds the test filesystem's mounter once per test binary, in a dir every user can
// reach: the go tool's build dir is private to root.
var mounterBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "s3csi-commdir-mounter-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil { //nolint:gosec // run by another user
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "fusetest-mounter")
	return bin, testenv.BuildModuleBinaryE(ctx, "services/mounter", testfs.MounterPackage, bin)
})

// startMounterAs runs the test filesystem's mounter (built from the mounter module) as uid,
// listening in commDir, as a Mountpoint Pod's mounter runs as its pod's uid.
func startMounterAs(t *testing.T, commDir string, uid uint32) {
	t.Helper()
	bin, err := mounterBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--comm-dir="+commDir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
}

// worldDir is a temporary dir every user can reach and write, as an emptyDir is for its pod.
func worldDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o777); err != nil { //nolint:gosec // the test mounter runs as another user
			t.Fatal(err)
		}
	}
	return dir
}

func TestSendChecksWhoServesTheSocket(t *testing.T) {
	tests := []struct {
		name       string
		mounterUID int
		refused    bool
	}{
		{"a socket served by another uid than the mounter's is refused", 0, true},
		{"a socket served by the mounter's uid gets the request", nobody, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			commDir := worldDir(t)
			startMounterAs(t, commDir, nobody)
			// The deadline starts once the mounter runs, not while it is built.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sock := filepath.Join(commDir, mppod.MountSockName)
			null, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = null.Close() }()
			err = handshake.SendTo(ctx, sock, tt.mounterUID, null, &handshake.Request{Bucket: "b", MaxRead: 1})
			if tt.refused {
				if !errors.Is(err, handshake.ErrWrongPeer) {
					t.Fatalf("SendTo = %v, want ErrWrongPeer", err)
				}
				return
			}
			var merr *handshake.MounterError
			if !errors.As(err, &merr) {
				t.Fatalf("SendTo = %v, want the mounter's own answer (it got the request)", err)
			}
		})
	}
}

func TestSendDoesNotFollowASymlinkAtMountSock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	outside := filepath.Join(t.TempDir(), "elsewhere.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: outside, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			_ = c.Close()
		}
	}()
	commDir := t.TempDir()
	sock := filepath.Join(commDir, mppod.MountSockName)
	if err := os.Symlink(outside, sock); err != nil {
		t.Fatal(err)
	}
	err = handshake.Send(ctx, sock, os.Stdin, &handshake.Request{Bucket: "b", MaxRead: 1})
	if !errors.Is(err, commdir.ErrUnsafe) {
		t.Fatalf("Send through a symlinked mount.sock = %v, want ErrUnsafe", err)
	}
	testenv.Eventually(t, 200*time.Millisecond, "a moment for a connection to arrive", func() bool { return true })
	select {
	case <-accepted:
		t.Fatal("the socket behind the symlink got a connection")
	default:
	}
}
