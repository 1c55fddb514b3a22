package handshake_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
)

// fakeMounter listens on a comm dir's socket like a mounter and takes one request.
type fakeMounter struct {
	ln *net.UnixListener
}

func listenFake(t *testing.T, sock string) *fakeMounter {
	t.Helper()
	_ = os.Remove(sock)
	ln, err := handshake.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return &fakeMounter{ln: ln}
}

// taken is a request a fakeMounter took, with its descriptors.
type taken struct {
	req   handshake.Request
	fds   []int
	conn  *net.UnixConn
	state unix.Stat_t
}

// take accepts one request, answers it with errText (empty: serving) and returns it; the
// connection stays open, as a serving mounter keeps it.
func (m *fakeMounter) take(t *testing.T, errText string) *taken {
	t.Helper()
	_ = m.ln.SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := m.ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4+handshake.MaxFrameSize)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	got := &taken{conn: conn}
	if err := handshake.ReadFrame(bytes.NewReader(buf[:n]), &got.req); err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages %d, %v", len(msgs), err)
	}
	if got.fds, err = unix.ParseUnixRights(&msgs[0]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, fd := range got.fds {
			_ = unix.Close(fd)
		}
		_ = conn.Close()
	})
	if len(got.fds) == 2 {
		if err := unix.Fstat(got.fds[1], &got.state); err != nil {
			t.Fatal(err)
		}
	}
	frame, err := handshake.EncodeFrame(&handshake.Response{Version: handshake.Version, Error: errText})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	return got
}

// die ends the mounter that took r: its descriptors and its connection close.
func (r *taken) die() {
	for _, fd := range r.fds {
		_ = unix.Close(fd)
	}
	r.fds = nil
	_ = r.conn.Close()
}

// mountedFUSE mounts /dev/fuse on a new dir and returns the dir and the device file.
func mountedFUSE(t *testing.T) (string, *os.File) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	dir := t.TempDir()
	dev, err := mount.FUSE(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir, dev
}

func keep(t *testing.T, sock string, dev *os.File, wait time.Duration) *handshake.Kept {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	k, err := handshake.Keep(ctx, sock, os.Getuid(), dev, &handshake.Request{Bucket: "b", MaxRead: 1 << 20},
		handshake.KeepOptions{Log: testr.New(t), ResumeWait: wait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k
}

func waitDone(t *testing.T, k *handshake.Kept, within time.Duration, what string) {
	t.Helper()
	select {
	case <-k.Done():
	case <-time.After(within):
		t.Fatalf("the kept connection still holds its descriptors %s after %s", what, within)
	}
}

func TestKeptHandsTheConnectionToTheNextMounter(t *testing.T) {
	dir, dev := mountedFUSE(t)
	sock := filepath.Join(t.TempDir(), "mount.sock")
	first := listenFake(t, sock)
	done := make(chan *taken, 1)
	go func() { done <- first.take(t, "") }()
	k := keep(t, sock, dev, time.Minute)
	_ = dev.Close()
	a := <-done
	if len(a.fds) != 2 || a.req.Resume {
		t.Fatalf("first request: %d descriptors, resume %t; want 2, false", len(a.fds), a.req.Resume)
	}

	// The mounter dies; kubelet starts the next one on the same socket.
	_ = first.ln.Close()
	a.die()
	second := listenFake(t, sock)
	b := second.take(t, "")
	if len(b.fds) != 2 || !b.req.Resume || b.req.Bucket != "b" {
		t.Fatalf("second request: %d descriptors, resume %t, bucket %q; want 2, true, b", len(b.fds), b.req.Resume, b.req.Bucket)
	}
	if b.state.Ino != a.state.Ino || b.state.Dev != a.state.Dev {
		t.Fatal("the next mounter got another state file than the first one recorded in")
	}
	if !handshake.Connected(dev2(t, b)) {
		t.Fatal("the FUSE connection ended while no mounter held it")
	}

	// Unmounted, then the mounter ends: nothing is left to hand over.
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	b.die()
	waitDone(t, k, 5*time.Second, "after the mounter of an unmounted source ended")
}

func TestKeptClosesTheConnectionWhenNoMounterTakesItOver(t *testing.T) {
	dir, dev := mountedFUSE(t)
	sock := filepath.Join(t.TempDir(), "mount.sock")
	first := listenFake(t, sock)
	done := make(chan *taken, 1)
	go func() { done <- first.take(t, "") }()
	k := keep(t, sock, dev, 300*time.Millisecond)
	_ = dev.Close()
	a := <-done
	_ = first.ln.Close()
	a.die()
	waitDone(t, k, 5*time.Second, "when no mounter came")
	// With no holder left, the kernel ended the connection: the mount answers ENOTCONN.
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); !errors.Is(err, unix.ENOTCONN) {
		t.Fatalf("statfs of the mount = %v, want ENOTCONN once no one holds the connection", err)
	}
}

func TestKeptGivesUpWhenTheCommDirGoes(t *testing.T) {
	_, dev := mountedFUSE(t)
	commDir := t.TempDir()
	sock := filepath.Join(commDir, "mount.sock")
	first := listenFake(t, sock)
	done := make(chan *taken, 1)
	go func() { done <- first.take(t, "") }()
	k := keep(t, sock, dev, time.Hour)
	_ = dev.Close()
	a := <-done
	_ = first.ln.Close()
	a.die()
	if err := os.RemoveAll(commDir); err != nil {
		t.Fatal(err)
	}
	waitDone(t, k, 5*time.Second, "after its Mountpoint Pod's comm dir went")
}

func TestKeptClosesTheConnectionWhenTheNextMounterRefusesIt(t *testing.T) {
	dir, dev := mountedFUSE(t)
	sock := filepath.Join(t.TempDir(), "mount.sock")
	first := listenFake(t, sock)
	done := make(chan *taken, 1)
	go func() { done <- first.take(t, "") }()
	k := keep(t, sock, dev, time.Minute)
	_ = dev.Close()
	a := <-done
	_ = first.ln.Close()
	a.die()
	second := listenFake(t, sock)
	b := second.take(t, "the state file is damaged")
	b.die()
	waitDone(t, k, 5*time.Second, "after the next mounter refused the connection")
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); !errors.Is(err, unix.ENOTCONN) {
		t.Fatalf("statfs of the mount = %v, want ENOTCONN", err)
	}
}

// dev2 is the /dev/fuse descriptor the mounter that took r received.
func dev2(t *testing.T, r *taken) *os.File {
	t.Helper()
	fd, err := unix.Dup(r.fds[0])
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "/dev/fuse")
	t.Cleanup(func() { _ = f.Close() })
	return f
}
