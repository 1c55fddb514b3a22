package handshake_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/handshake"
)

// socketPair is a connected pair of stream sockets: the peer's raw descriptor and our end.
func socketPair(t *testing.T) (int, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[1]), "ours")
	c, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fds[0]); _ = c.Close() })
	return fds[0], c.(*net.UnixConn)
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// sendWithFiles sends data with n copies of /dev/null attached.
func sendWithFiles(t *testing.T, peer int, data []byte, n int) {
	t.Helper()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	fds := make([]int, n)
	for i := range fds {
		fds[i] = int(null.Fd())
	}
	if err := unix.Sendmsg(peer, data, unix.UnixRights(fds...), nil, 0); err != nil {
		t.Fatal(err)
	}
}

// A peer that spreads descriptors over the segments of a frame is refused at the first segment
// that brings them over two, without waiting for the rest of the frame, and nothing it sent
// stays open.
func TestReceiveRefusesDescriptorsSpreadOverSegments(t *testing.T) {
	peer, conn := socketPair(t)
	header := binary.BigEndian.AppendUint32(nil, 1000) // a frame of 1,000 bytes, never sent whole
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	before := openFDs(t)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for _, b := range header {
			// Errors end the sender: the receiver stops reading once it refused.
			if unix.Sendmsg(peer, []byte{b}, unix.UnixRights(int(null.Fd()), int(null.Fd())), nil, 0) != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { <-sent }()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var resp handshake.Response
	fds, err := handshake.Receive(conn, &resp)
	if err == nil || !strings.Contains(err.Error(), "file descriptors") {
		t.Fatalf("Receive = %v, %v; want a refusal of the descriptors", fds, err)
	}
	if after := openFDs(t); after > before {
		t.Fatalf("%d descriptors open after the refusal, %d before", after, before)
	}
}

// More descriptors in one segment than a frame may carry are refused too (the kernel closes
// those beyond the room given, MSG_CTRUNC).
func TestReceiveRefusesTooManyDescriptorsInOneSegment(t *testing.T) {
	peer, conn := socketPair(t)
	before := openFDs(t)
	frame, err := handshake.EncodeFrame(&handshake.Response{Version: handshake.Version})
	if err != nil {
		t.Fatal(err)
	}
	sendWithFiles(t, peer, frame, 5)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var resp handshake.Response
	if fds, err := handshake.Receive(conn, &resp); err == nil {
		t.Fatalf("Receive took %d descriptors, want a refusal", len(fds))
	}
	if after := openFDs(t); after > before {
		t.Fatalf("%d descriptors open after the refusal, %d before", after, before)
	}
}

// Descriptors received are close-on-exec: no child of the node-agent inherits a FUSE connection.
func TestReceivedDescriptorsAreCloseOnExec(t *testing.T) {
	peer, conn := socketPair(t)
	frame, err := handshake.EncodeFrame(&handshake.Response{Version: handshake.Version})
	if err != nil {
		t.Fatal(err)
	}
	sendWithFiles(t, peer, frame, 2)
	var resp handshake.Response
	fds, err := handshake.Receive(conn, &resp)
	if err != nil || len(fds) != 2 {
		t.Fatalf("Receive = %v, %v; want two descriptors", fds, err)
	}
	for _, fd := range fds {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("descriptor %d: flags %#x, %v; want FD_CLOEXEC", fd, flags, err)
		}
		_ = unix.Close(fd)
	}
}

// A mounter's error text reaches the node-agent (and from there the workload's Events and the
// bus) cut to about 1 KiB, with no control character: the pod chooses that text.
func TestAMountersErrorTextIsMadePrintable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mount.sock")
	m := listenFake(t, sock)
	hostile := strings.Repeat("forged\nlog line \x1b[31m\x00", 2500)
	taken := make(chan struct{})
	go func() {
		defer close(taken)
		m.take(t, hostile)
	}()
	defer func() { <-taken }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := handshake.Send(ctx, sock, os.Stdin, &handshake.Request{Version: handshake.Version, Bucket: "b", MaxRead: 1})
	var me *handshake.MounterError
	if !errors.As(err, &me) {
		t.Fatalf("Send = %v, want the mounter's error", err)
	}
	switch {
	case len(me.Message) > handshake.MaxErrorText+len("…"):
		t.Fatalf("error text of %d bytes reached the caller, want at most %d", len(me.Message), handshake.MaxErrorText)
	case !utf8.ValidString(me.Message):
		t.Fatalf("error text is not valid UTF-8: %q", me.Message)
	case strings.ContainsFunc(me.Message, unicode.IsControl):
		t.Fatalf("error text holds control characters: %q", me.Message)
	case !strings.HasPrefix(me.Message, "forged\uFFFDlog line"):
		t.Fatalf("error text = %q, want the mounter's words with its control characters replaced", me.Message[:40])
	}
}
