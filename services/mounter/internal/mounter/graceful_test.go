package mounter_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/mounter/internal/fusetest"
)

// keepsServingLog is what the mounter logs when a SIGTERM arrives while it serves.
const keepsServingLog = "keeps serving until"

// servingPod is a mounter child serving the test filesystem on source, as in a Mountpoint Pod
// whose source the node-agent mounted.
type servingPod struct {
	*mounterProcess
	commDir, source string
}

func startServing(ctx context.Context, t *testing.T) *servingPod {
	t.Helper()
	dir := t.TempDir()
	p := &servingPod{commDir: filepath.Join(dir, "comm"), source: filepath.Join(dir, "source")}
	for _, d := range []string{p.commDir, p.source} {
		if err := os.Mkdir(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	p.mounterProcess = startMounterChild(t, p.commDir)
	dev, err := mount.FUSE(p.source, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(p.source, syscall.MNT_DETACH) })
	err = handshake.Send(ctx, filepath.Join(p.commDir, mppod.MountSockName), dev, &handshake.Request{
		Bucket: "bucket-a", MaxRead: mount.FUSEMaxRead,
	})
	_ = dev.Close()
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return p
}

// sigterm sends SIGTERM as kubelet does when the Mountpoint Pod is deleted or evicted.
func (p *servingPod) sigterm(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// waitKeepsServing waits until the mounter logged that it took the SIGTERM and keeps serving;
// it fails the test if the mounter exits instead.
func (p *servingPod) waitKeepsServing(ctx context.Context, t *testing.T, times int) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for strings.Count(p.output.String(), keepsServingLog) < times {
		select {
		case c := <-p.code:
			t.Fatalf("the mounter exited (code %d) on SIGTERM while its filesystem served a reader", c)
		case <-ctx.Done():
			t.Fatal("the mounter neither exited nor logged that it keeps serving")
		case <-tick.C:
		}
	}
}

// exitCode waits for the mounter's exit code.
func (p *servingPod) exitCode(ctx context.Context, t *testing.T) int {
	t.Helper()
	select {
	case c := <-p.code:
		return c
	case <-ctx.Done():
		t.Fatal("the mounter did not exit")
		return -1
	}
}

// readAt reads the whole hello file through f from offset 0.
func readAt(t *testing.T, f *os.File) string {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil {
		t.Fatalf("read through the open file after SIGTERM: %v", err)
	}
	return string(b)
}

// TestSIGTERMWhileServingKeepsTheMountUntilTheNodeAgentUnmounts plays the deletion or
// eviction of a Mountpoint Pod whose workload still reads: kubelet sends SIGTERM, the reader
// keeps reading (through a file it holds open and through new opens), and only the node-agent's
// unmount (once the last bind is gone) ends the mounter, with the exit code of mount.exit.
func TestSIGTERMWhileServingKeepsTheMountUntilTheNodeAgentUnmounts(t *testing.T) {
	for _, tt := range []struct {
		name        string
		exitRequest bool
		wantCode    int
	}{
		{name: "an unmount after the node-agent's exit request ends it with 0", exitRequest: true, wantCode: 0},
		{name: "an unmount without an exit request ends it with 1 and mount.err", wantCode: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			p := startServing(ctx, t)
			hello := filepath.Join(p.source, fusetest.HelloName)
			reader, err := os.Open(hello)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = reader.Close() }()
			if got := readAt(t, reader); got != fusetest.HelloContent {
				t.Fatalf("read before SIGTERM = %q", got)
			}

			p.sigterm(t)
			p.waitKeepsServing(ctx, t, 1)
			for range 3 {
				if got := readAt(t, reader); got != fusetest.HelloContent {
					t.Fatalf("read through the open file after SIGTERM = %q", got)
				}
				if got, err := os.ReadFile(hello); err != nil || string(got) != fusetest.HelloContent {
					t.Fatalf("open and read after SIGTERM = %q, %v", got, err)
				}
			}
			_ = reader.Close()

			if tt.exitRequest {
				if err := os.WriteFile(filepath.Join(p.commDir, mppod.MountExitName), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := mount.Unmount(p.source); err != nil {
				t.Fatal(err)
			}
			if c := p.exitCode(ctx, t); c != tt.wantCode {
				t.Fatalf("exit code %d after the unmount, want %d", c, tt.wantCode)
			}
			msg, err := os.ReadFile(filepath.Join(p.commDir, mppod.MountErrName))
			if tt.wantCode == 0 && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("mount.err after a clean exit: %q, %v", msg, err)
			}
			if tt.wantCode != 0 && (err != nil || !strings.Contains(string(msg), "unmounted without a clean-exit request")) {
				t.Fatalf("mount.err = %q, %v", msg, err)
			}
		})
	}
}

// TestASecondSIGTERMStopsAServingMounter: the operator (or kubelet, after a shorter grace
// period was asked for) insists; the mounter ends, writes why, and the mount is dead.
func TestASecondSIGTERMStopsAServingMounter(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	p := startServing(ctx, t)
	p.sigterm(t)
	p.waitKeepsServing(ctx, t, 1)
	p.sigterm(t)
	if c := p.exitCode(ctx, t); c != 1 {
		t.Fatalf("exit code %d after a second SIGTERM, want 1", c)
	}
	msg, err := os.ReadFile(filepath.Join(p.commDir, mppod.MountErrName))
	if err != nil || !strings.Contains(string(msg), "second") {
		t.Fatalf("mount.err = %q, %v; want it to name the second signal", msg, err)
	}
	if _, err := os.ReadFile(filepath.Join(p.source, fusetest.HelloName)); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("read after the mounter stopped: %v, want ENOTCONN", err)
	}
}

// TestSIGTERMBeforeAMountEndsTheMounter: with nothing served yet, nothing holds the pod.
func TestSIGTERMBeforeAMountEndsTheMounter(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	commDir := t.TempDir()
	p := &servingPod{mounterProcess: startMounterChild(t, commDir), commDir: commDir}
	sock := filepath.Join(commDir, mppod.MountSockName)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the mounter never listened")
		case <-time.After(10 * time.Millisecond):
		}
	}
	p.sigterm(t)
	if c := p.exitCode(ctx, t); c != 1 {
		t.Fatalf("exit code %d, want 1", c)
	}
	if strings.Contains(p.output.String(), keepsServingLog) {
		t.Fatal("the mounter claims to keep serving with nothing mounted")
	}
}
