package handshake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/commdir"
)

// dialRetry is the pause between connection attempts while the mounter is not listening yet.
const dialRetry = 20 * time.Millisecond

// ErrNoAnswer is a mounter that received a connection and did not answer in time: it may still
// be taking the connection over, so the connection is never sent to another one.
var ErrNoAnswer = errors.New("the mounter did not answer")

// MounterError is the mounter's own answer: it received the request and could not serve. Its
// text is the mounter's, for the operator, made Printable; errors of the exchange itself are not
// MounterErrors.
type MounterError struct{ Message string }

// newMounterError is the MounterError of an answer's error text.
func newMounterError(text string) *MounterError { return &MounterError{Message: Printable(text)} }

// MaxErrorText bounds the mounter's error text that reaches kubelet's Events and the bus.
const MaxErrorText = 1024

// Printable is text a Mountpoint Pod wrote, made fit for an Event, a log line or an event on the
// bus: cut to MaxErrorText bytes (on a character boundary, marked with "…"), invalid UTF-8 and
// control characters (newlines, escapes, which could forge log lines or terminal output)
// replaced with U+FFFD.
//
// Problem: the pod controls that text (up to a frame, 64 KiB) and it was passed verbatim into
// the workload's FailedMount Event and mount.failed.
// Invariant: the result is valid UTF-8 of at most MaxErrorText bytes plus the marker, without
// control characters.
func Printable(text string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(text, "\uFFFD") {
		if unicode.IsControl(r) {
			r = unicode.ReplacementChar
		}
		if b.Len()+utf8.RuneLen(r) > MaxErrorText {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (e *MounterError) Error() string { return "mounter: " + e.Message }

// ErrWrongPeer is returned when the process listening on the socket is not the mounter's user.
var ErrWrongPeer = errors.New("mounter socket served by another user")

// Send is SendTo with the caller's own uid as the mounter's: for a mounter this process started.
func Send(ctx context.Context, sockPath string, fuse *os.File, req *Request) error {
	return SendTo(ctx, sockPath, os.Getuid(), fuse, req)
}

// SendTo connects to the mounter's socket, checks that the process listening on it runs as
// mounterUID, sends req with fuse attached and waits for the answer on the same connection. It
// retries the connection while the socket is missing or refuses (the mounter is starting)
// until ctx is done; the whole exchange is bounded by ctx. It returns nil when the filesystem
// serves, a *MounterError when the mounter refused or failed.
//
// Problem: the socket lives in a dir the Mountpoint Pod writes: a symlink there, or a socket
// bound by another process, would receive a FUSE device fd and the volume's credentials paths.
// Solution: the socket is opened with openat2(RESOLVE_NO_SYMLINKS), checked to be a socket, and
// connected through its O_PATH handle; the peer's SO_PEERCRED uid must be mounterUID.
// Invariant: nothing is sent before the peer's uid was checked.
func SendTo(ctx context.Context, sockPath string, mounterUID int, fuse *os.File, req *Request) error {
	conn, err := exchange(ctx, sockPath, mounterUID, []*os.File{fuse}, req)
	if conn != nil {
		_ = conn.Close()
	}
	return err
}

// exchange sends req with files attached as SendTo does and returns the connection, open, when
// the mounter answered; the mounter keeps it open while it serves.
func exchange(ctx context.Context, sockPath string, mounterUID int, files []*os.File, req *Request) (*net.UnixConn, error) {
	return exchangeWithin(ctx, ctx, 0, sockPath, mounterUID, files, req)
}

// exchangeWithin is exchange in which, once the request is sent, the wait for the answer is
// bounded by answerWait from then, within base, instead of by ctx (answerWait 0: by ctx).
//
// Problem: a resume's request is sent once the next mounter listens, which may take most of the
// time allowed to find it (a pod replaced, an image pulled); its answer comes after the replay
// of every node id the kernel holds, which takes as long as the workloads walked far. One budget
// for both failed large resumes that came late.
// Solution: two budgets, the second starting when the request is sent.
func exchangeWithin(ctx, base context.Context, answerWait time.Duration, sockPath string, mounterUID int, files []*os.File, req *Request) (*net.UnixConn, error) {
	req.Version = RequestVersion(req)
	frame, err := EncodeFrame(req)
	if err != nil {
		return nil, err
	}
	conn, err := connect(ctx, sockPath, mounterUID)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*net.UnixConn, error) {
		_ = conn.Close()
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer func() { stop() }()

	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	rights := unix.UnixRights(fds...)
	n, oobn, err := conn.WriteMsgUnix(frame, rights, nil)
	if err != nil {
		return fail(fmt.Errorf("send mount request to %s: %w", sockPath, ctxErr(ctx, err)))
	}
	if n != len(frame) || oobn != len(rights) {
		return fail(fmt.Errorf("send mount request to %s: short write (%d of %d bytes)", sockPath, n, len(frame)))
	}
	if answerWait > 0 {
		if !stop() {
			return fail(fmt.Errorf("send mount request to %s: %w", sockPath, ctx.Err()))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(base, answerWait,
			fmt.Errorf("%w within %s of receiving the connection", ErrNoAnswer, answerWait))
		defer cancel()
		stop = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	}
	var resp Response
	if err := ReadFrame(conn, &resp); err != nil {
		if cause := context.Cause(ctx); answerWait > 0 && errors.Is(cause, ErrNoAnswer) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		return fail(fmt.Errorf("wait for the mounter's answer on %s: %w", sockPath, ctxErr(ctx, err)))
	}
	if resp.Error != "" {
		return fail(newMounterError(resp.Error))
	}
	if !stop() {
		return fail(fmt.Errorf("wait for the mounter's answer on %s: %w", sockPath, ctx.Err()))
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// connect connects to the mounter's socket (dial) and checks that its listener runs as
// mounterUID.
func connect(ctx context.Context, sockPath string, mounterUID int) (*net.UnixConn, error) {
	conn, err := dial(ctx, sockPath)
	if err != nil {
		return nil, err
	}
	if err := checkPeer(conn, mounterUID); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("connect to mounter socket %s: %w", sockPath, err)
	}
	return conn, nil
}

// dial connects to sockPath, retrying while the mounter is not listening yet.
//
// Problem: sockaddr_un holds 107 bytes, and kubelet paths with a pod UID come close to that.
// Solution: long paths are reached through /proc/self/fd/<dirfd>/<name> of the opened parent.
// Invariant: the connection goes to the same socket file whatever the path length.
func dial(ctx context.Context, sockPath string) (*net.UnixConn, error) {
	for {
		conn, err := dialOnce(sockPath)
		if err == nil {
			return conn, nil
		}
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("connect to mounter socket %s: %w", sockPath, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to mounter socket %s: %w (last error: %w)", sockPath, ctx.Err(), err)
		case <-time.After(dialRetry):
		}
	}
}

// dialOnce connects to the socket without following a symlink at its name (see SendTo).
func dialOnce(sockPath string) (*net.UnixConn, error) {
	dir, err := commdir.Open(filepath.Dir(sockPath))
	if err != nil {
		return nil, err
	}
	defer func() { _ = dir.Close() }()
	sock, err := dir.OpenSocket(filepath.Base(sockPath))
	if err != nil {
		return nil, err
	}
	defer func() { _ = sock.Close() }()
	return net.DialUnix("unix", nil, &net.UnixAddr{Name: commdir.SocketPath(sock), Net: "unix"})
}

// checkPeer compares the uid of the process that bound the socket with want.
func checkPeer(conn *net.UnixConn, want int) error {
	uid, pid, err := PeerCred(conn)
	if err != nil {
		return err
	}
	if uid != want {
		return fmt.Errorf("%w: the listener (pid %d) runs as uid %d, the mounter as uid %d", ErrWrongPeer, pid, uid, want)
	}
	return nil
}

// PeerCred returns the uid and pid of the process at the other end of conn (SO_PEERCRED).
func PeerCred(conn *net.UnixConn) (uid, pid int, err error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, 0, fmt.Errorf("read peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, fmt.Errorf("read peer credentials: %w", err)
	}
	if credErr != nil {
		return 0, 0, fmt.Errorf("read peer credentials: %w", credErr)
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// ctxErr prefers the context's error over the deadline error it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}
