package handshake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
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

// commDirCheck is how often a Kept connection waiting for a mounter checks that the comm dir is
// still there (it goes with the Mountpoint Pod).
const commDirCheck = 500 * time.Millisecond

// Kept is a mounted source's FUSE connection, held by the process that mounted it for as long as
// the source is mounted, with the state file the serving mounter records it in.
//
// Problem: the kernel ends a FUSE connection when the last process holding its descriptor goes,
// so a mounter killed (OOM, SIGKILL, a crash) leaves every workload with "Transport endpoint is
// not connected" until the workload is restarted.
// Solution: the node-agent keeps a copy of the descriptor and a state file (a memfd) in which
// the mounter journals what the kernel holds. The mounter keeps the handshake connection open
// while it serves; when it ends, and the FUSE connection still lives (the source was not
// unmounted), Kept sends the same request with Resume and both files to the next mounter on the
// socket (kubelet restarts the container in the same Mountpoint Pod), which takes the connection
// over: the workloads see a pause, and the kernel resends what the dead mounter had taken.
// Invariant: no connection stays without a server longer than ResumeWait: when no mounter takes
// it over in time, the comm dir goes (the Mountpoint Pod was deleted) or the new mounter refuses
// it, Kept closes its descriptors, the connection ends, and the workloads get ENOTCONN, as
// without Kept, and the node-agent mounts the source again on the next publish.
type Kept struct {
	sockPath   string
	mounterUID int
	dev, state *os.File
	req        *Request
	log        logr.Logger
	wait       time.Duration
	resumed    func(time.Duration)

	stop context.CancelFunc
	done chan struct{}
	mu   sync.Mutex
	conn *net.UnixConn
}

// KeepOptions tune Keep.
type KeepOptions struct {
	// Log receives the connection's life: each mounter that ended and took it over.
	Log logr.Logger
	// ResumeWait is how long a mounter may take to take the connection over; zero means
	// DefaultResumeWait.
	ResumeWait time.Duration
	// Resumed, when set, is called after a new mounter took the connection over, with the time
	// from the end of the previous one.
	Resumed func(pause time.Duration)
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
	watch, stop := context.WithCancel(context.WithoutCancel(ctx))
	k := &Kept{
		sockPath: sockPath, mounterUID: mounterUID, dev: dev, state: state, req: req, log: o.Log,
		wait: o.ResumeWait, resumed: o.Resumed, stop: stop, done: make(chan struct{}), conn: conn,
	}
	if k.wait <= 0 {
		k.wait = DefaultResumeWait
	}
	go k.watch(watch)
	return k, nil
}

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
		k.awaitEnd()
		if ctx.Err() != nil {
			return
		}
		if !Connected(k.dev) {
			k.log.V(1).Info("The mounter ended after its FUSE connection", "socket", k.sockPath)
			return
		}
		k.log.Info("The mounter ended while its source is mounted: handing the FUSE connection to the mounter that replaces it",
			"socket", k.sockPath, "wait", k.wait.String())
		start := time.Now()
		conn, err := k.resume(ctx)
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
			k.resumed(pause)
		}
		k.mu.Lock()
		k.conn = conn
		k.mu.Unlock()
		if ctx.Err() != nil { // Close raced with the exchange
			_ = conn.SetDeadline(time.Now())
		}
	}
}

// awaitEnd returns when the mounter closes the handshake connection (it ended) or Close cuts it.
func (k *Kept) awaitEnd() {
	k.mu.Lock()
	conn := k.conn
	k.mu.Unlock()
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
}

// resume sends the request with Resume to the next mounter on the socket, until ResumeWait, the
// comm dir goes or ctx ends.
func (k *Kept) resume(ctx context.Context) (*net.UnixConn, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, k.wait, fmt.Errorf("no mounter listened within %s", k.wait))
	defer cancel()
	gone, stopCheck := context.WithCancelCause(ctx)
	defer stopCheck(nil)
	go func() {
		t := time.NewTicker(commDirCheck)
		defer t.Stop()
		for {
			select {
			case <-gone.Done():
				return
			case <-t.C:
				if _, err := os.Stat(filepath.Dir(k.sockPath)); errors.Is(err, os.ErrNotExist) {
					stopCheck(errors.New("the comm dir is gone with its Mountpoint Pod"))
					return
				}
			}
		}
	}()
	req := proto.CloneOf(k.req)
	req.Resume = true
	conn, err := exchange(gone, k.sockPath, k.mounterUID, []*os.File{k.dev, k.state}, req)
	if err != nil && context.Cause(gone) != nil && gone.Err() != nil {
		return nil, fmt.Errorf("%w: %w", context.Cause(gone), err)
	}
	return conn, err
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
