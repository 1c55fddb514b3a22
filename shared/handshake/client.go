package handshake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// dialRetry is the pause between connection attempts while the mounter is not listening yet.
const dialRetry = 20 * time.Millisecond

// MounterError is the mounter's own answer: it received the request and could not serve. Its
// text is the mounter's, for the operator; errors of the exchange itself are not MounterErrors.
type MounterError struct{ Message string }

func (e *MounterError) Error() string { return "mounter: " + e.Message }

// Send connects to the mounter's socket, sends req with fuse attached and waits for the answer
// on the same connection. It retries the connection while the socket is missing or refuses
// (the mounter is starting) until ctx is done; the whole exchange is bounded by ctx.
// It returns nil when the filesystem serves, a *MounterError when the mounter refused or failed.
func Send(ctx context.Context, sockPath string, fuse *os.File, req *Request) error {
	req.Version = Version
	frame, err := EncodeFrame(req)
	if err != nil {
		return err
	}
	conn, err := dial(ctx, sockPath)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	rights := unix.UnixRights(int(fuse.Fd()))
	n, oobn, err := conn.WriteMsgUnix(frame, rights, nil)
	if err != nil {
		return fmt.Errorf("send mount request to %s: %w", sockPath, ctxErr(ctx, err))
	}
	if n != len(frame) || oobn != len(rights) {
		return fmt.Errorf("send mount request to %s: short write (%d of %d bytes)", sockPath, n, len(frame))
	}
	var resp Response
	if err := ReadFrame(conn, &resp); err != nil {
		return fmt.Errorf("wait for the mounter's answer on %s: %w", sockPath, ctxErr(ctx, err))
	}
	if resp.Error != "" {
		return &MounterError{Message: resp.Error}
	}
	return nil
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

func dialOnce(sockPath string) (*net.UnixConn, error) {
	var conn *net.UnixConn
	err := withShortPath(sockPath, func(p string) error {
		var err error
		conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: p, Net: "unix"})
		return err
	})
	return conn, err
}

// ctxErr prefers the context's error over the deadline error it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}
