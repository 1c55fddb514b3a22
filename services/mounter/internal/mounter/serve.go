package mounter

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/handshake"
)

// requestTimeout bounds the time a connected peer may take to send its request.
const requestTimeout = 30 * time.Second

// Engine starts a filesystem on a FUSE connection.
type Engine interface {
	// Mount serves req's bucket on the FUSE connection fd, which the caller's peer opened and
	// mounted, and returns once the filesystem answers requests. state, when not nil, is where
	// the filesystem records what the kernel holds; with req.Resume it takes the connection
	// over from what a previous mounter recorded there. ctx bounds the set-up only: the
	// filesystem keeps serving after it ends. Mount owns fd and state: it closes them on error
	// and when the filesystem stops. The returned error text is shown to the operator (as the
	// NodePublishVolume error), so it must say what is wrong and never hold secrets.
	Mount(ctx context.Context, fd int, state *os.File, req *handshake.Request) (Mounted, error)
}

// Mounted is a serving filesystem.
type Mounted interface {
	// Wait blocks until the filesystem stops serving: nil once it was unmounted, else why it
	// stopped.
	Wait() error
}

// Serve accepts connections on ln until one request is mounted by engine, answers it, and then
// waits until that filesystem stops, keeping that connection open so that the peer sees the
// mounter end, however it ends. A connection with an invalid request is answered with the error
// and the next one is accepted; an engine failure is answered and returned. Serve closes ln
// before it returns.
//
// Problem: kubelet sends SIGTERM to a Mountpoint Pod that is deleted or evicted while its
// workloads still read and write through the mount; stopping then breaks every one of them at
// once, although the node-agent unmounts the filesystem anyway as soon as the last bind is gone.
// Solution: two stop requests. stopRequested (the first signal) ends the wait for a request
// and a set-up in progress, but once the filesystem serves it is only logged: the filesystem
// serves until it is unmounted. ctx (a second signal, or the caller) ends Serve at any time.
// Invariant: a first stop request never ends a mount that is serving; kubelet's SIGKILL at the
// end of the pod's grace period bounds how long it serves on.
func Serve(ctx context.Context, ln *net.UnixListener, engine Engine, stopRequested <-chan struct{}) error {
	log := logr.FromContextOrDiscard(ctx)
	setup, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-stopRequested:
			cancel(errStoppedBeforeServing)
		case <-setup.Done():
		}
	}()
	stop := context.AfterFunc(setup, func() { _ = ln.Close() })
	defer stop()
	defer func() { _ = ln.Close() }()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if setup.Err() != nil {
				return fmt.Errorf("accept mount request: %w", context.Cause(setup))
			}
			return fmt.Errorf("accept mount request: %w", err)
		}
		mounted, err := handle(setup, conn, engine)
		var invalid *invalidRequestError
		switch {
		case errors.As(err, &invalid):
			_ = conn.Close()
			log.Info("Refused an invalid mount request", "reason", err.Error())
			continue
		case err != nil:
			_ = conn.Close()
			return err
		}
		stop()
		_ = ln.Close()
		log.Info("Filesystem serving")
		err = wait(ctx, mounted, stopRequested)
		_ = conn.Close()
		return err
	}
}

// errStoppedBeforeServing ends a mounter asked to stop before it served a filesystem.
var errStoppedBeforeServing = errors.New("asked to stop before a filesystem was served")

// wait returns when the filesystem stops or ctx ends; a stop request is only logged.
func wait(ctx context.Context, m Mounted, stopRequested <-chan struct{}) error {
	done := make(chan error, 1)
	go func() { done <- m.Wait() }()
	for {
		select {
		case err := <-done:
			return err
		case <-stopRequested:
			stopRequested = nil
			logr.FromContextOrDiscard(ctx).Info("Asked to stop while serving: the filesystem keeps serving until " +
				"the node-agent unmounts it, once no workload binds it any more; a second signal, or the end of " +
				"the pod's termination grace period, stops it now and disconnects those workloads")
		case <-ctx.Done():
			return fmt.Errorf("stopped while serving, before the filesystem was unmounted: %w", context.Cause(ctx))
		}
	}
}

type invalidRequestError struct{ err error }

func (e *invalidRequestError) Error() string { return e.err.Error() }
func (e *invalidRequestError) Unwrap() error { return e.err }

// handle reads one request and its file, runs the engine and answers.
func handle(ctx context.Context, conn *net.UnixConn, engine Engine) (Mounted, error) {
	_ = conn.SetDeadline(time.Now().Add(requestTimeout))
	req, fds, err := receive(conn)
	if err == nil {
		err = handshake.ValidateRequest(req)
		if err == nil && req.Resume && len(fds) < 2 {
			err = errors.New("a resume request without the state file")
		}
		if err != nil {
			closeAll(fds)
		}
	}
	if err != nil {
		answer(conn, err.Error())
		return nil, &invalidRequestError{err: err}
	}
	var state *os.File
	if len(fds) == 2 {
		state = os.NewFile(uintptr(fds[1]), "state") //nolint:gosec // descriptors are not negative
	}
	mounted, err := engine.Mount(ctx, fds[0], state, req)
	if err != nil {
		answer(conn, err.Error())
		return nil, fmt.Errorf("mount bucket %s: %w", req.Bucket, err)
	}
	answer(conn, "")
	return mounted, nil
}

func answer(conn *net.UnixConn, msg string) {
	frame, err := handshake.EncodeFrame(&handshake.Response{Version: handshake.Version, Error: msg})
	if err != nil {
		return
	}
	_, _ = conn.Write(frame)
}

// receive reads one request frame and its attached descriptors: the /dev/fuse file, then the
// state file, which a request may leave out (handshake.Send): its mount cannot be resumed.
func receive(conn *net.UnixConn) (*handshake.Request, []int, error) {
	buf := make([]byte, 4+handshake.MaxFrameSize)
	oob := make([]byte, unix.CmsgSpace(4*4))
	var fds []int
	got := 0
	want := -1
	for want < 0 || got < want {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf[got:], oob)
		if oobn > 0 {
			fds = append(fds, parseRights(oob[:oobn])...)
		}
		if err != nil {
			closeAll(fds)
			return nil, nil, fmt.Errorf("read mount request: %w", err)
		}
		if n == 0 {
			closeAll(fds)
			return nil, nil, errors.New("read mount request: connection closed early")
		}
		got += n
		if want < 0 && got >= 4 {
			size := binary.BigEndian.Uint32(buf[:4])
			if size > handshake.MaxFrameSize {
				closeAll(fds)
				return nil, nil, fmt.Errorf("read mount request: %d bytes exceed %d", size, handshake.MaxFrameSize)
			}
			want = 4 + int(size)
		}
	}
	if len(fds) != 1 && len(fds) != 2 {
		closeAll(fds)
		return nil, nil, fmt.Errorf("read mount request: want 1 or 2 file descriptors, got %d", len(fds))
	}
	var req handshake.Request
	if err := handshake.DecodeBody(bytes.NewReader(buf[4:want]), uint32(want-4), &req); err != nil { //nolint:gosec // bounded
		closeAll(fds)
		return nil, nil, err
	}
	return &req, fds, nil
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if rights, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, rights...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
