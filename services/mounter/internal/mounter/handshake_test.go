package mounter_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/mounter/internal/fusetest"
	"github.com/s3csi/s3csi/services/mounter/internal/mounter"
)

// startMounter runs the mounter side in-process and returns its exit code channel. Only for
// tests that never read a FUSE mount it serves (see startMounterProcess).
func startMounter(ctx context.Context, t *testing.T, commDir string, engine mounter.Engine) <-chan int {
	t.Helper()
	code := make(chan int, 1)
	go func() { code <- mounter.Run(ctx, commDir, engine, nil) }()
	return code
}

func cleanupMount(t *testing.T, dir string) {
	t.Cleanup(func() {
		if err := mount.Unmount(dir); err != nil {
			t.Logf("unmount %s: %v; detaching lazily", dir, err)
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
}

func TestMountHandshakeServesAFilesystemOnThePassedConnection(t *testing.T) {
	dir := t.TempDir()
	commDir := filepath.Join(dir, "comm")
	source := filepath.Join(dir, "source")
	for _, d := range []string{commDir, source} {
		if err := os.Mkdir(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := startMounterProcess(t, commDir)

	dev, err := mount.FUSE(source, false)
	if err != nil {
		t.Fatal(err)
	}
	cleanupMount(t, source)
	// What the node-agent sends for a read-only volume of a pod with an fsGroup, on an endpoint
	// that needs path-style addressing.
	args := []string{"--allow-other", "--dir-mode=770", "--file-mode=660", "--force-path-style", "--gid=3000", "--read-only"}
	err = handshake.Send(ctx, filepath.Join(commDir, mppod.MountSockName), dev, &handshake.Request{
		Bucket: "bucket-a", MaxRead: mount.FUSEMaxRead, Args: args,
		Env: []string{"AWS_PROFILE=s3csi", "AWS_REGION=us-east-1", "AWS_ENDPOINT_URL=https://ring.example"},
	})
	_ = dev.Close()
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(source, fusetest.HelloName))
	if err != nil || string(got) != fusetest.HelloContent {
		t.Fatalf("read through the mount: %q, %v", got, err)
	}
	got, err = os.ReadFile(filepath.Join(source, fusetest.ArgsName))
	if err != nil || string(got) != strings.Join(args, "\n") {
		t.Fatalf("the filesystem got the arguments %q, %v; want %q", got, err, args)
	}
	if err := os.WriteFile(filepath.Join(commDir, mppod.MountExitName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := mount.Unmount(source); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("mounter exit code %d after a requested exit, want 0", c)
		}
	case <-ctx.Done():
		t.Fatal("mounter did not exit after unmount")
	}
}

func TestMounterRefusesAnInvalidRequestAndKeepsListening(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := startMounter(ctx, t, dir, fusetest.NewEngine(dir))
	sock := filepath.Join(dir, mppod.MountSockName)

	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = null.Close() }()
	err = handshake.Send(ctx, sock, null, &handshake.Request{Bucket: "", MaxRead: 1})
	var merr *handshake.MounterError
	if !errors.As(err, &merr) {
		t.Fatalf("send invalid request: %v, want a MounterError", err)
	}
	err = handshake.Send(ctx, sock, null, &handshake.Request{Bucket: "b", MaxRead: 1, Resume: true})
	if !errors.As(err, &merr) || !strings.Contains(merr.Message, "state file") {
		t.Fatalf("send a resume request without its state file: %v, want a MounterError naming it", err)
	}
	// Defense in depth: what the node-agent's policy refuses, the mounter refuses too.
	for _, tt := range []struct {
		name string
		req  *handshake.Request
		want string
	}{
		{name: "an endpoint option", req: &handshake.Request{Bucket: "b", MaxRead: 1, Args: []string{"--allow-root", "--endpoint-url=http://evil.example"}},
			want: `mount option "--endpoint-url=http://evil.example" is not allowed: the endpoint is set by the driver's configuration`},
		{name: "a profile option", req: &handshake.Request{Bucket: "b", MaxRead: 1, Args: []string{"--profile=x"}},
			want: `mount option "--profile=x" is not allowed: credentials are provided by the driver`},
		{name: "an unknown environment variable", req: &handshake.Request{Bucket: "b", MaxRead: 1, Env: []string{"AWS_PROFILE=s3csi", "AWS_CA_BUNDLE=/evil"}},
			want: `environment variable "AWS_CA_BUNDLE" is not allowed`},
	} {
		err = handshake.Send(ctx, sock, null, tt.req)
		if !errors.As(err, &merr) || !strings.Contains(merr.Message, tt.want) {
			t.Fatalf("send a request with %s: %v, want a MounterError containing %q", tt.name, err, tt.want)
		}
	}
	// Still listening: an engine failure (a /dev/null fd is no FUSE connection) ends the run.
	err = handshake.Send(ctx, sock, null, &handshake.Request{Bucket: "b", MaxRead: 1})
	if !errors.As(err, &merr) {
		t.Fatalf("send to a failing engine: %v, want a MounterError", err)
	}
	if c := <-code; c != 1 {
		t.Fatalf("exit code %d, want 1", c)
	}
	b, err := os.ReadFile(filepath.Join(dir, mppod.MountErrName))
	if err != nil || len(b) == 0 {
		t.Fatalf("mount.err: %q, %v", b, err)
	}
}

// A Mountpoint Pod whose mount never came (its workloads went first): mount.exit ends the wait
// for the request, with exit code 0.
func TestMountExitBeforeAnyRequestEndsTheMounter(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	commDir := t.TempDir()
	code := startMounter(ctx, t, commDir, fusetest.NewEngine(t.TempDir()))
	if err := os.WriteFile(filepath.Join(commDir, mppod.MountExitName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d, want 0", c)
		}
	case <-ctx.Done():
		t.Fatal("the mounter still waits for a mount request after mount.exit")
	}
}
