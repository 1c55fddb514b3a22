package handshake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// DefaultResumeWait is how long a Kept connection waits for a mounter to take it over after the
// one serving it ended: kubelet restarts a crashed mounter container at once the first time,
// later after a back-off of 10 s, 20 s and so on.
const DefaultResumeWait = time.Minute

// DefaultReplayWait is how long a mounter that received a Kept connection may take to answer:
// it replays what the kernel holds (a lookup per node id, an open per handle) before it serves.
const DefaultReplayWait = 5 * time.Minute

// waitCheck is how often a Kept connection waiting for a mounter checks that the comm dir of the
// socket it waits on is still there (it goes with the Mountpoint Pod) and that the connection
// still lives (the source was not unmounted meanwhile).
const waitCheck = 500 * time.Millisecond

// Kept is a mounted source's FUSE connection, held by the process that mounted it for as long as
// the source is mounted, with the state file the serving mounter records it in.
//
// Problem: the kernel ends a FUSE connection when the last process holding its descriptor goes,
// so a mounter killed (OOM, SIGKILL, a crash) leaves every workload with "Transport endpoint is
// not connected" until the workload is restarted.
// Solution: the node-agent keeps a copy of the descriptor and a state file (a memfd) in which
// the mounter journals what the kernel holds. The mounter keeps the handshake connection open
// while it serves; when it ends, and the FUSE connection still lives (the source was not
// unmounted), Kept sends the same request with Resume and both files to the next mounter
// (KeepOptions.Next: kubelet restarts a crashed container in the same Mountpoint Pod; a deleted
// pod, whose mounter handed the mount over, is replaced by a new one), which takes the connection
// over: the workloads see a pause, and the kernel resends what a dead mounter had taken.
// Invariant: no connection stays without a server longer than ResumeWait plus ReplayWait: when
// no mounter received it within ResumeWait, or the one that did has not answered within
// ReplayWait, or Next fails, or the new mounter refuses it, Kept closes its descriptors,
// the connection ends, and the workloads get ENOTCONN, as without Kept, and the node-agent mounts
// the source again on the next publish.
type Kept struct {
	sockPath   string
	mounterUID int
	dev, state *os.File
	req        *Request
	log        logr.Logger
	wait       time.Duration
	replayWait time.Duration
	resumed    func(Resumption)
	next       func(ctx context.Context, handedOver bool) (string, error)

	stop context.CancelFunc
	done chan struct{}
	mu   sync.Mutex
	conn *net.UnixConn
}

// KeepOptions tune Keep.
type KeepOptions struct {
	// Log receives the connection's life: each mounter that ended and took it over.
	Log logr.Logger
	// ResumeWait is how long the next mounter may take to receive the connection (its pod
	// replaced, its image pulled, its socket listening); zero means DefaultResumeWait.
	ResumeWait time.Duration
	// ReplayWait is how long the mounter that received the connection may take to answer (the
	// replay of what the kernel holds); zero means DefaultReplayWait.
	ReplayWait time.Duration
	// Resumed, when set, is called after a new mounter took the connection over.
	Resumed func(Resumption)
	// Next, when set, returns the socket of the mounter to hand the connection to after the
	// serving one ended, waiting for it as long as ctx allows: the node-agent's answer is the
	// socket of the Mountpoint Pod that serves the source now, which is a new pod after a
	// deletion. handedOver says that the mounter that ended handed the mount over: its pod is
	// going and will not serve again, so the answer must be another pod's. Next is asked again
	// when the comm dir of the socket it gave goes before a mounter took the connection over
	// there. Without it, the next mounter listens where the first one did, and that comm dir
	// going ends the wait.
	Next func(ctx context.Context, handedOver bool) (string, error)
}

// Resumption is a new mounter taking a Kept connection over.
type Resumption struct {
	// Pause is the time from the end of the previous mounter.
	Pause time.Duration
	// HandedOver: the previous mounter stopped so that the next one takes over (its pod was
	// going), with no request unanswered and no file open for writing; else it died.
	HandedOver bool
}

// Keep creates the state file, sends req with fuse and the state file to the mounter at sockPath
// as SendTo does, and once the mounter serves, keeps a copy of fuse and the state file and
// watches the mounter (see Kept). The caller keeps its own fuse and may close it. ctx bounds the
// first exchange only; Close ends the watch.
func Keep(ctx context.Context, sockPath string, mounterUID int, fuse *os.File, req *Request, o KeepOptions) (*Kept, error) {
	dup, err := unix.FcntlInt(fuse.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("keep the FUSE descriptor: %w", err)
	}
	dev := os.NewFile(uintptr(dup), "/dev/fuse") //nolint:gosec // descriptors are not negative
	sfd, err := unix.MemfdCreate("s3csi-fuse-state", unix.MFD_CLOEXEC)
	if err != nil {
		_ = dev.Close()
		return nil, fmt.Errorf("create the FUSE state file: %w", err)
	}
	state := os.NewFile(uintptr(sfd), "s3csi-fuse-state") //nolint:gosec // descriptors are not negative
	req.Resume = false
	conn, err := exchange(ctx, sockPath, mounterUID, []*os.File{dev, state}, req)
	if err != nil {
		_ = dev.Close()
		_ = state.Close()
		return nil, err
	}
	return keep(ctx, sockPath, mounterUID, conn, dev, state, req, o), nil
}

// ErrAnswerDiffers is the error of a Reattach whose mounter answered with a request other than the
// one the caller recorded sending it.
var ErrAnswerDiffers = errors.New("the mounter answered with a request other than the one it was sent")

// Reattach asks the mounter serving at sockPath for its request and its /dev/fuse and state
// descriptors, and keeps them as Keep does: for a node-agent that restarted, so that the mounter
// ending, or handing the mount over, does not end its workloads' mount. The mounter answers only
// the uid that sent its mount request.
//
// Problem: the mounter runs in a Mountpoint Pod, which parses data others wrote and may be
// compromised; a request taken back from it (another bucket, endpoint or option) would be sent
// by root to every mounter that replaces it, fresh keys included, for the life of the source.
// Solution: the caller passes sent, the request it recorded sending that mounter (Keep's req);
// an answer naming any other request is refused with ErrAnswerDiffers, and the Kept connection
// only ever sends sent.
// Invariant: a Kept connection sends the next mounter only what its keeper recorded itself.
func Reattach(ctx context.Context, sockPath string, mounterUID int, sent *Request, o KeepOptions) (*Kept, error) {
	if sent == nil {
		return nil, errors.New("reattach: no record of the request sent to the mounter")
	}
	conn, err := connect(ctx, sockPath, mounterUID)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Kept, error) {
		_ = conn.Close()
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	frame, err := EncodeFrame(&Request{Version: Version, Reattach: true})
	if err != nil {
		return fail(err)
	}
	if _, err := conn.Write(frame); err != nil {
		return fail(fmt.Errorf("send reattach request to %s: %w", sockPath, ctxErr(ctx, err)))
	}
	var resp Response
	fds, err := Receive(conn, &resp)
	if err != nil {
		return fail(fmt.Errorf("wait for the mounter's answer on %s: %w", sockPath, ctxErr(ctx, err)))
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "kept") //nolint:gosec // descriptors are not negative
	}
	failFiles := func(err error) (*Kept, error) {
		for _, f := range files {
			_ = f.Close()
		}
		return fail(err)
	}
	switch {
	case resp.Error != "":
		return failFiles(newMounterError(resp.Error))
	case len(files) != 2:
		return failFiles(fmt.Errorf("reattach to %s: the answer carries %d descriptors, want 2", sockPath, len(files)))
	case resp.Serving == nil:
		return failFiles(fmt.Errorf("reattach to %s: the answer names no request", sockPath))
	}
	if fields := differing(resp.Serving, sent); len(fields) > 0 {
		return failFiles(fmt.Errorf("reattach to %s: %w (%s differ): refused, the connection is left to that mounter alone",
			sockPath, ErrAnswerDiffers, strings.Join(fields, ", ")))
	}
	if err := checkKinds(files[0], files[1]); err != nil {
		return failFiles(fmt.Errorf("reattach to %s: %w", sockPath, err))
	}
	if err := checkStateSize(files[1]); err != nil {
		return failFiles(fmt.Errorf("reattach to %s: %w", sockPath, err))
	}
	if !stop() {
		return failFiles(fmt.Errorf("reattach to %s: %w", sockPath, ctx.Err()))
	}
	_ = conn.SetDeadline(time.Time{})
	req := proto.CloneOf(sent)
	req.Resume = false
	return keep(ctx, sockPath, mounterUID, conn, files[0], files[1], req, o), nil
}

// differing names the fields of the request a mounter says it serves that differ from the
// request it was sent (Resume aside), never their values: they came from the mounter.
func differing(got, sent *Request) []string {
	var fields []string
	g, w := got.ProtoReflect(), sent.ProtoReflect()
	fds := w.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.Name() == "resume" {
			continue
		}
		if !g.Get(fd).Equal(w.Get(fd)) || g.Has(fd) != w.Has(fd) {
			fields = append(fields, string(fd.Name()))
		}
	}
	if len(g.GetUnknown()) > 0 {
		fields = append(fields, "unknown fields")
	}
	return fields
}

// fuseDevice is /dev/fuse's device number (major 10, minor 229).
var fuseDevice = unix.Mkdev(10, 229)

// MaxStateSize is the largest state file handed to a mounter: what a connection whose kernel
// holds a million node ids and open files records takes about a tenth of it.
const MaxStateSize = 256 << 20

// checkStateSize refuses a state file over MaxStateSize.
//
// Problem: the serving mounter, which a Mountpoint Pod runs, writes the state file; one that
// grew it without bound had root pass it on, and the next mounter read it whole into memory.
// Invariant: no state file over MaxStateSize reaches a mounter.
func checkStateSize(state *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(state.Fd()), &st); err != nil { //nolint:gosec // descriptors fit
		return fmt.Errorf("check the state file: %w", err)
	}
	if st.Size > MaxStateSize {
		return fmt.Errorf("the state file holds %d bytes, more than the %d a connection's state takes: "+
			"not handed to a mounter", st.Size, MaxStateSize)
	}
	return nil
}

// checkKinds checks that a mounter gave back a /dev/fuse descriptor and a regular file (the
// state memfd), not anything else it could open.
func checkKinds(dev, state *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(dev.Fd()), &st); err != nil { //nolint:gosec // descriptors fit
		return fmt.Errorf("check the FUSE descriptor: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != fuseDevice {
		return errors.New("the descriptor given back as the FUSE connection is not /dev/fuse")
	}
	if err := unix.Fstat(int(state.Fd()), &st); err != nil { //nolint:gosec // descriptors fit
		return fmt.Errorf("check the state file: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("the descriptor given back as the state file is not a regular file")
	}
	return nil
}

// keep starts watching the mounter at the end of conn, with copies of its descriptors.
func keep(ctx context.Context, sockPath string, mounterUID int, conn *net.UnixConn, dev, state *os.File, req *Request, o KeepOptions) *Kept {
	watch, stop := context.WithCancel(context.WithoutCancel(ctx))
	k := &Kept{
		sockPath: sockPath, mounterUID: mounterUID, dev: dev, state: state, req: req, log: o.Log,
		wait: o.ResumeWait, replayWait: cmp.Or(o.ReplayWait, DefaultReplayWait), resumed: o.Resumed, next: o.Next, stop: stop, done: make(chan struct{}), conn: conn,
	}
	if k.next == nil {
		k.next = k.sameSocket
	}
	if k.wait <= 0 {
		k.wait = DefaultResumeWait
	}
	go k.watch(watch)
	return k
}

// Request returns the request the Kept connection sends the next mounter (without Resume).
func (k *Kept) Request() *Request { return proto.CloneOf(k.req) }

// Close stops watching and closes the kept descriptors: a connection no mounter serves then ends.
func (k *Kept) Close() {
	k.stop()
	k.mu.Lock()
	if k.conn != nil {
		_ = k.conn.SetDeadline(time.Now())
	}
	k.mu.Unlock()
	<-k.done
}

// Done is closed once the Kept connection let go of its descriptors.
func (k *Kept) Done() <-chan struct{} { return k.done }

func (k *Kept) watch(ctx context.Context) {
	defer func() {
		_ = k.dev.Close()
		_ = k.state.Close()
		close(k.done)
	}()
	for {
		handedOver := k.awaitEnd()
		if ctx.Err() != nil {
			return
		}
		if !Connected(k.dev) {
			k.log.V(1).Info("The mounter ended after its FUSE connection", "socket", k.sockPath)
			return
		}
		k.log.Info("The mounter ended while its source is mounted: handing the FUSE connection to the mounter that replaces it",
			"socket", k.sockPath, "handedOver", handedOver, "wait", k.wait.String())
		start := time.Now()
		conn, err := k.resume(ctx, handedOver)
		if err != nil {
			if ctx.Err() == nil {
				k.log.Error(err, "No mounter took the FUSE connection over: closing it, so its workloads get "+
					"\"Transport endpoint is not connected\" until they are restarted or the volume is published again", "socket", k.sockPath)
			}
			return
		}
		pause := time.Since(start)
		k.log.Info("A new mounter took the FUSE connection over", "socket", k.sockPath, "pause", pause.String())
		if k.resumed != nil {
			k.resumed(Resumption{Pause: pause, HandedOver: handedOver})
		}
		k.mu.Lock()
		k.conn = conn
		k.mu.Unlock()
		if ctx.Err() != nil { // Close raced with the exchange
			_ = conn.SetDeadline(time.Now())
		}
	}
}

// awaitEnd returns when the mounter closes the handshake connection (it ended) or Close cuts it,
// and whether the mounter said it handed the connection over before it ended.
func (k *Kept) awaitEnd() (handedOver bool) {
	k.mu.Lock()
	conn := k.conn
	k.mu.Unlock()
	for {
		var resp Response
		if err := ReadFrame(conn, &resp); err != nil {
			break
		}
		handedOver = handedOver || resp.GetHandedOver()
	}
	// A frame that does not decode ends the reading of frames, not the wait for the end.
	buf := make([]byte, 64)
	for {
		if _, err := conn.Read(buf); err != nil {
			break
		}
	}
	_ = conn.Close()
	k.mu.Lock()
	k.conn = nil
	k.mu.Unlock()
	return handedOver
}

// resume sends the request with Resume to the next mounter (KeepOptions.Next), until one takes
// the connection over, ResumeWait ends, the connection ends (the source was unmounted) or ctx
// ends.
func (k *Kept) resume(ctx context.Context, handedOver bool) (*net.UnixConn, error) {
	var checks sync.WaitGroup
	defer checks.Wait() // the caller closes k.dev next
	outer := ctx
	ctx, cancel := context.WithTimeoutCause(ctx, k.wait, fmt.Errorf("no mounter took it over within %s", k.wait))
	defer cancel()
	ctx, unmounted := context.WithCancelCause(ctx)
	defer unmounted(nil)
	checks.Go(func() { watch(ctx, unmounted, errUnmounted, func() bool { return !Connected(k.dev) }) })
	if err := checkStateSize(k.state); err != nil {
		return nil, err
	}
	req := proto.CloneOf(k.req)
	req.Resume = true
	for {
		sock, err := k.next(ctx, handedOver)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return nil, fmt.Errorf("%w: %w", cause, err)
			}
			return nil, err
		}
		attempt, stop := context.WithCancelCause(ctx)
		checks.Go(func() {
			watch(attempt, stop, errCommDirGone, func() bool {
				_, err := os.Stat(filepath.Dir(sock))
				return errors.Is(err, os.ErrNotExist)
			})
		})
		conn, err := exchangeWithin(attempt, outer, k.replayWait, sock, k.mounterUID, []*os.File{k.dev, k.state}, req)
		cause := context.Cause(attempt)
		stop(nil)
		var refused *MounterError
		switch {
		case err == nil:
			k.sockPath = sock
			return conn, nil
		case errors.Is(cause, errCommDirGone) && ctx.Err() == nil:
			k.log.Info("The Mountpoint Pod went before a mounter took the FUSE connection over: waiting for the next one", "socket", sock)
			continue
		case cause != nil:
			return nil, fmt.Errorf("%w: %w", cause, err)
		case errors.As(err, &refused), errors.Is(err, ErrNoAnswer):
			return nil, err
		}
		// No mounter answered: the one whose listener took the connection was ending (its
		// listener's queue is dropped with it, descriptors included), or one starts.
		k.log.V(1).Info("No answer on the mounter socket yet; trying again", "socket", sock, "error", err.Error())
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", context.Cause(ctx), err)
		case <-time.After(retryAnswer):
		}
	}
}

// retryAnswer is the pause before a Kept connection sends its request again after no mounter
// answered it.
const retryAnswer = dialRetry

var (
	errCommDirGone = errors.New("the comm dir is gone with its Mountpoint Pod")
	errUnmounted   = errors.New("the source was unmounted")
)

// watch cancels ctx with cause once ended reports true, checking every waitCheck.
func watch(ctx context.Context, cancel context.CancelCauseFunc, cause error, ended func() bool) {
	t := time.NewTicker(waitCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ended() {
				cancel(cause)
				return
			}
		}
	}
}

// sameSocket is the default KeepOptions.Next: the first mounter's socket, while its comm dir is
// there.
func (k *Kept) sameSocket(context.Context, bool) (string, error) {
	if _, err := os.Stat(filepath.Dir(k.sockPath)); errors.Is(err, os.ErrNotExist) {
		return "", errCommDirGone
	}
	return k.sockPath, nil
}

// Connected reports whether the FUSE connection of dev is alive: not unmounted, not aborted.
func Connected(dev *os.File) bool {
	pfd := []unix.PollFd{{Fd: int32(dev.Fd()), Events: unix.POLLIN}} //nolint:gosec // descriptors fit
	for {
		_, err := unix.Poll(pfd, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && pfd[0].Revents&unix.POLLERR == 0
	}
}
