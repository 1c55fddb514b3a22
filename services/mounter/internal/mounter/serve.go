package mounter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
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
// once.
// Solution: two stop requests. stopRequested (the first signal) ends the wait for a request and
// a set-up in progress. Once the filesystem serves, a mount that the next mounter can take over
// (HandingOver) is handed over: it stops once no file is open for writing, and Serve returns
// ErrHandedOver, while the node-agent keeps the connection for the Mountpoint Pod that replaces
// this one. Any other mount serves on until it is unmounted (the node-agent unmounts it once the
// last bind is gone). ctx (a second signal, or the caller) ends Serve at any time.
// Invariant: a first stop request never fails a request of a serving mount; kubelet's SIGKILL at
// the end of the pod's grace period bounds how long it serves on.
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
		mounted, sv, err := handle(setup, conn, engine)
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
		// The listener must outlive a stop request that follows the answer at once (the
		// node-agent may restart, and a reattach needs it), so the set-up's closer is removed
		// before the peer hears that the filesystem serves.
		stop()
		answer(conn, "")
		k := &keeper{conn: conn}
		if sv == nil {
			_ = ln.Close()
		} else {
			defer sv.close()
			go acceptReattach(logr.NewContext(ctx, log), ln, sv, k)
		}
		log.Info("Filesystem serving")
		err = wait(ctx, mounted, stopRequested, k.open)
		_ = ln.Close()
		k.end(errors.Is(err, ErrHandedOver))
		return err
	}
}

// keeper is the handshake connection of the node-agent that keeps a copy of the FUSE connection
// (handshake.Kept): the one that sent the request, or the one that reattached last.
type keeper struct {
	mu    sync.Mutex
	conn  *net.UnixConn
	ended bool
}

// open reports whether the keeper still holds its end of the connection.
func (k *keeper) open() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.ended && peerOpen(k.conn)
}

// replace makes conn the keeper's connection and closes the previous one.
func (k *keeper) replace(conn *net.UnixConn) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ended {
		_ = conn.Close()
		return
	}
	_ = k.conn.Close()
	k.conn = conn
}

// end tells the keeper, when handedOver, that the mount was handed over, and closes the
// connection: the keeper sees the mounter end.
func (k *keeper) end(handedOver bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if handedOver {
		if frame, err := handshake.EncodeFrame(&handshake.Response{Version: handshake.Version, HandedOver: true}); err == nil {
			_, _ = k.conn.Write(frame)
		}
	}
	_ = k.conn.Close()
	k.ended = true
}

// served is what a mounter whose mount can be handed over gives back to a node-agent that
// reattaches: the request it serves, copies of its /dev/fuse and state descriptors, and the uid
// that may ask (the sender of the request).
type served struct {
	req         *handshake.Request
	fuse, state *os.File
	uid         int
}

func (sv *served) close() {
	_ = sv.fuse.Close()
	_ = sv.state.Close()
}

// acceptReattach answers reattach requests on ln until it is closed.
//
// Problem: the node-agent keeps its copy of the FUSE connection in its process, so after it
// restarts no one but the mounter holds it: a mounter that ends then, or that is asked to hand
// the mount over, ends its workloads' mount.
// Solution: the mounter keeps listening while it serves; a reattach request from the uid that
// sent the mount request gets the request and copies of both descriptors, and its connection
// becomes the keeper's.
// Invariant: nothing is sent before the peer's uid was checked; any other request is refused.
func acceptReattach(ctx context.Context, ln *net.UnixListener, sv *served, k *keeper) {
	log := logr.FromContextOrDiscard(ctx)
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		if err := reattach(conn, sv); err != nil {
			answer(conn, err.Error())
			_ = conn.Close()
			log.Info("Refused a request while serving", "reason", err.Error())
			continue
		}
		k.replace(conn)
		log.Info("A restarted node-agent reattached: it keeps the FUSE connection for the next mounter again")
	}
}

// reattach reads a reattach request on conn and answers it with sv.
func reattach(conn *net.UnixConn, sv *served) error {
	_ = conn.SetDeadline(time.Now().Add(requestTimeout))
	defer func() { _ = conn.SetDeadline(time.Time{}) }()
	var req handshake.Request
	fds, err := handshake.Receive(conn, &req)
	closeAll(fds) // a reattach request carries none
	switch {
	case err != nil:
		return fmt.Errorf("read request: %w", err)
	case !req.Reattach:
		return errors.New("this mounter already serves a mount: it takes only reattach requests")
	case handshake.CheckVersion(req.Version) != nil:
		return handshake.CheckVersion(req.Version)
	}
	uid, _, err := handshake.PeerCred(conn)
	if err != nil {
		return err
	}
	if uid != sv.uid {
		return fmt.Errorf("a reattach request from uid %d: only uid %d, which sent the mount request, may reattach", uid, sv.uid)
	}
	frame, err := handshake.EncodeFrame(&handshake.Response{Version: handshake.Version, Serving: sv.req})
	if err != nil {
		return err
	}
	rights := unix.UnixRights(int(sv.fuse.Fd()), int(sv.state.Fd())) //nolint:gosec // descriptors fit
	if _, _, err := conn.WriteMsgUnix(frame, rights, nil); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	return nil
}

// errStoppedBeforeServing ends a mounter asked to stop before it served a filesystem.
var errStoppedBeforeServing = errors.New("asked to stop before a filesystem was served")

// ErrHandedOver is returned by Serve when the filesystem stopped so that the next mounter takes
// its connection over (HandingOver).
var ErrHandedOver = errors.New("handed the mount over to the next mounter")

// HandingOver is a Mounted whose connection the next mounter can take over from the state it
// records.
type HandingOver interface {
	// HandOver starts the hand-over and returns, or fails at once when this mount cannot be
	// taken over. The filesystem serves until no file is open for writing and keeperOpen
	// reports that the node-agent that holds the connection for the next mounter is there,
	// then stops reading requests and answers those it read; Wait then returns ErrHandedOver.
	// ctx ends the wait.
	HandOver(ctx context.Context, keeperOpen func() bool) error
}

// wait returns when the filesystem stops or ctx ends; a stop request hands a HandingOver mount
// over once keeperOpen reports that the node-agent that keeps the connection is there, and is
// only logged for any other mount.
func wait(ctx context.Context, m Mounted, stopRequested <-chan struct{}, keeperOpen func() bool) error {
	log := logr.FromContextOrDiscard(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Wait() }()
	for {
		select {
		case err := <-done:
			return err
		case <-stopRequested:
			stopRequested = nil
			h, ok := m.(HandingOver)
			if !ok {
				log.Info("Asked to stop while serving: the filesystem keeps serving until " +
					"the node-agent unmounts it, once no workload binds it any more; a second signal, or the end of " +
					"the pod's termination grace period, stops it now and disconnects those workloads")
				continue
			}
			if err := h.HandOver(ctx, keeperOpen); err != nil {
				log.Info("Asked to stop while serving, but the mount cannot be handed over: the filesystem keeps "+
					"serving until the node-agent unmounts it, once no workload binds it any more; a second signal, "+
					"or the end of the pod's termination grace period, stops it now and disconnects those workloads",
					"reason", err.Error())
				continue
			}
			if !keeperOpen() {
				log.Info("Asked to stop while serving: the node-agent that holds the connection for the next mounter " +
					"is gone (it restarted since the mount); the filesystem keeps serving, and hands the mount over " +
					"once a node-agent reattached and no file is open for writing")
				continue
			}
			log.Info("Asked to stop while serving: handing the mount over to the mounter of the Mountpoint Pod that " +
				"replaces this one, as soon as no file is open for writing; its workloads see a pause, not an error")
		case <-ctx.Done():
			return fmt.Errorf("stopped while serving, before the filesystem was unmounted: %w", context.Cause(ctx))
		}
	}
}

// peerOpen reports whether the peer of conn still has it open: a peek finds no end of stream.
func peerOpen(conn *net.UnixConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	buf := make([]byte, 1)
	_ = raw.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = n > 0 || errors.Is(err, unix.EAGAIN)
		return true
	})
	return open
}

type invalidRequestError struct{ err error }

func (e *invalidRequestError) Error() string { return e.err.Error() }
func (e *invalidRequestError) Unwrap() error { return e.err }

// handle reads one request and its files, checks it (its form, and the mount-option policy:
// checkPolicy), and runs the engine; it answers a failure, and leaves the answer to a success
// to the caller. When the mount can be handed over it returns what a reattaching node-agent
// gets (served), else nil.
func handle(ctx context.Context, conn *net.UnixConn, engine Engine) (Mounted, *served, error) {
	_ = conn.SetDeadline(time.Now().Add(requestTimeout))
	req, fds, err := receive(conn)
	if err == nil {
		err = handshake.ValidateRequest(req)
		if err == nil {
			err = checkPolicy(req)
		}
		if err == nil && req.Resume && len(fds) < 2 {
			err = errors.New("a resume request without the state file")
		}
		if err != nil {
			closeAll(fds)
		}
	}
	if err != nil {
		answer(conn, err.Error())
		return nil, nil, &invalidRequestError{err: err}
	}
	var state *os.File
	var sv *served
	if len(fds) == 2 {
		state = os.NewFile(uintptr(fds[1]), "state") //nolint:gosec // descriptors are not negative
		sv = keepCopies(conn, req, fds)
	}
	mounted, err := engine.Mount(ctx, fds[0], state, req)
	if err != nil {
		if sv != nil {
			sv.close()
		}
		answer(conn, err.Error())
		return nil, nil, fmt.Errorf("mount bucket %s: %w", req.Bucket, err)
	}
	if _, ok := mounted.(HandingOver); !ok && sv != nil {
		sv.close() // an engine whose mount ends with its server keeps no other copy alive
		sv = nil
	}
	return mounted, sv, nil
}

// keepCopies duplicates the request's /dev/fuse and state descriptors for a node-agent that
// reattaches later (served); nil when they cannot be had.
func keepCopies(conn *net.UnixConn, req *handshake.Request, fds []int) *served {
	uid, _, err := handshake.PeerCred(conn)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, fd := range fds {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) //nolint:gosec // descriptors are not negative
		if err != nil {
			for _, f := range files {
				_ = f.Close()
			}
			return nil
		}
		files = append(files, os.NewFile(uintptr(dup), "kept")) //nolint:gosec // descriptors are not negative
	}
	return &served{req: req, fuse: files[0], state: files[1], uid: uid}
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
	var req handshake.Request
	fds, err := handshake.Receive(conn, &req)
	if err != nil {
		return nil, nil, fmt.Errorf("read mount request: %w", err)
	}
	if len(fds) != 1 && len(fds) != 2 {
		closeAll(fds)
		return nil, nil, fmt.Errorf("read mount request: want 1 or 2 file descriptors, got %d", len(fds))
	}
	return &req, fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
