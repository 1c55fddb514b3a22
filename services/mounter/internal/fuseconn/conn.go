// Package fuseconn serves a FUSE connection (a /dev/fuse descriptor) with a go-fuse filesystem
// through our own request loop, so that the connection can outlive its server: Stop drains it for
// a planned handover, a journal records what the kernel holds (node ids and their lookup counts,
// open file handles, the negotiated INIT), and Resume lets a new server, in this process or
// another one, take the connection over from that journal after the old one stopped or died.
//
// The kernel keeps a FUSE connection while any process holds its descriptor, and since Linux 6.9
// resends, on FUSE_NOTIFY_RESEND, the requests a dead server had read but not answered.
package fuseconn

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// bufSize holds the largest request (a 1 MiB WRITE and its headers) and the largest reply (a
// 1 MiB READ); Serve refuses mount options with larger transfers.
const (
	maxTransfer = 1 << 20
	bufSize     = maxTransfer + 64<<10
	smallSize   = 8 << 10
)

// ErrStopped is returned by Wait after Stop.
var ErrStopped = errors.New("the FUSE server stopped; the connection stays for the next one")

// ErrResendUnsupported is wrapped by Resume's error when the kernel cannot resend the requests the
// previous server had read without answering (Linux before 6.9): the connection is served, but
// those requests wait until the connection is aborted.
var ErrResendUnsupported = errors.New("the kernel does not resend requests of a dead FUSE server")

// Options tune a connection's server.
type Options struct {
	// Journal, when set, records what the kernel holds so that another server can Resume the
	// connection: for Serve an empty file (a memfd), for Resume the previous server's.
	Journal *os.File
	// Log receives the connection's errors.
	Log logr.Logger
	// UID and GID are the caller of the requests Resume replays: one the filesystem lets in.
	UID, GID uint32
	// Version, when set, returns the version of a node's content that a handle opened for
	// reading just now reads (s3fs: the object's ETag), or nil. It is journaled with the handle,
	// and a resumed server that opens the handle again and finds another version answers ESTALE
	// on it: the object was replaced while no server served, and reading on would mix the two.
	Version func(nodeID uint64) []byte
}

// Conn is a served FUSE connection.
type Conn struct {
	fd   int
	ps   *fuse.ProtocolServer
	st   *state
	log  logr.Logger
	opts Options

	wakeMu   sync.Mutex
	wake     int // eventfd that Stop signals to end the loop; -1 once closed
	inflight sync.WaitGroup
	holds    holds
	done     chan struct{}
	err      error // why the loop ended; read after done

	big, small sync.Pool
	// replayed is what Resume restored; zero for a Conn that Serve started.
	replayed Replayed
}

var syntheticCounter atomic.Uint64

// syntheticUnique numbers the requests this package makes up, far above the kernel's.
func syntheticUnique() uint64 { return 1<<63 | syntheticCounter.Add(1) }

func newConn(fd int, fsys fuse.RawFileSystem, mo *fuse.MountOptions, o Options) (*Conn, error) {
	if mo.MaxWrite > maxTransfer || mo.MaxReadAhead > maxTransfer {
		return nil, fmt.Errorf("serve FUSE: transfers above %d bytes are not supported", maxTransfer)
	}
	if !mo.DisableReadDirPlus {
		// READDIRPLUS replies hand out lookups this package does not count.
		return nil, errors.New("serve FUSE: READDIRPLUS must be disabled")
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("create eventfd: %w", err)
	}
	c := &Conn{fd: fd, ps: fuse.NewProtocolServer(fsys, mo), st: newState(), log: o.Log, opts: o, wake: wake, done: make(chan struct{})}
	c.big.New = func() any { b := make([]byte, bufSize); return &b }
	c.small.New = func() any { b := make([]byte, smallSize); return &b }
	c.st.forward = func(req []byte) { c.call(req) }
	c.st.version = o.Version
	return c, nil
}

// Serve serves fd, a /dev/fuse descriptor whose connection has just been mounted: it answers the
// kernel's INIT, then serves requests in the background until the connection ends (Wait).
func Serve(fd int, fsys fuse.RawFileSystem, mo *fuse.MountOptions, o Options) (*Conn, error) {
	c, err := newConn(fd, fsys, mo, o)
	if err != nil {
		return nil, err
	}
	if o.Journal != nil {
		if c.st.j, err = newJournal(o.Journal); err != nil {
			c.close()
			return nil, err
		}
	}
	if err := c.init(); err != nil {
		c.close()
		return nil, err
	}
	go c.loop()
	return c, nil
}

// init answers the connection's first request, INIT, and records it.
func (c *Conn) init() error {
	buf := make([]byte, bufSize)
	var n int
	for {
		var err error
		n, err = c.readRequest(buf)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("read FUSE INIT: %w", err)
		}
	}
	req := buf[:n]
	h, ok := parseHeader(req)
	if !ok || h.opcode != opInit {
		return fmt.Errorf("read FUSE INIT: the first request has opcode %d", h.opcode)
	}
	out := make([]byte, smallSize)
	m, st := c.ps.HandleRequest([][]byte{req}, [][]byte{out})
	if !st.Ok() || replyError(out[:m]) != 0 {
		return fmt.Errorf("answer FUSE INIT: %v", st)
	}
	c.st.mu.Lock()
	c.st.initIn, c.st.initOut = append([]byte(nil), req...), append([]byte(nil), out[:m]...)
	if c.st.j != nil {
		_ = c.st.j.append(append([]byte{recInit}, req...), append([]byte{recInitReply}, out[:m]...))
	}
	c.st.mu.Unlock()
	return c.write(out[:m])
}

// readRequest waits until the connection has a request or Stop is called, then reads it.
func (c *Conn) readRequest(buf []byte) (int, error) {
	pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}, {Fd: int32(c.wake), Events: unix.POLLIN}} //nolint:gosec // descriptors fit
	for {
		if _, err := unix.Poll(pfd, -1); err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return 0, fmt.Errorf("poll /dev/fuse: %w", err)
		}
		if pfd[1].Revents != 0 {
			return 0, ErrStopped
		}
		if pfd[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(c.fd, buf)
		if err != nil {
			return 0, err
		}
		return n, nil
	}
}

func (c *Conn) loop() {
	defer func() {
		c.inflight.Wait()
		c.close()
		close(c.done)
	}()
	for {
		bp := c.big.Get().(*[]byte) //nolint:forcetypeassert,errcheck // the pool holds only these
		n, err := c.readRequest(*bp)
		switch {
		case err == nil:
		case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.ENOENT):
			// ENOENT: the request was interrupted before we read it.
			c.big.Put(bp)
			continue
		case errors.Is(err, syscall.ENODEV), errors.Is(err, syscall.ECONNABORTED):
			// Unmounted or aborted: the connection is gone. A read that takes a queued request
			// (a RELEASE) at the moment an unmount shuts the connection fails with ECONNABORTED.
			c.big.Put(bp)
			return
		default:
			c.big.Put(bp)
			c.err = err
			return
		}
		c.inflight.Add(1)
		go c.serve(bp, n)
	}
}

// serve answers one request.
func (c *Conn) serve(bp *[]byte, n int) {
	defer c.inflight.Done()
	req := (*bp)[:n]
	if n <= smallSize {
		// Give the big buffer back at once: only writes keep one while they are served.
		sp := c.small.Get().(*[]byte) //nolint:forcetypeassert,errcheck // the pool holds only these
		req = append((*sp)[:0], req...)
		c.big.Put(bp)
		bp = sp
	}
	defer c.putBuf(bp)
	h, ok := parseHeader(req)
	if !ok {
		c.log.Error(nil, "Dropped a malformed FUSE request", "bytes", n)
		return
	}
	switch h.opcode {
	case opForget, opBatchForget:
		c.st.forget(h, req)
		return
	case opPoll:
		// The kernel stops polling after ENOSYS; a Go process reading its own mount would
		// otherwise wait on a POLL its netpoller sent.
		_ = c.write(errorReply(h.unique, syscall.ENOSYS))
		return
	}
	if opensForWriting(h.opcode, req) {
		if !c.holds.pass() {
			return // held until the server stopped: the kernel resends it to the next one
		}
		defer c.holds.served()
	}
	if v := c.st.admit(h, req); v.reply {
		_ = c.write(errorReply(h.unique, v.errno))
		return
	}
	op := c.outBuf(h.opcode)
	defer c.putBuf(op)
	m, st := c.ps.HandleRequest([][]byte{req}, [][]byte{*op})
	switch {
	case !st.Ok():
		_ = c.write(errorReply(h.unique, syscall.EIO))
	case m > 0:
		reply := (*op)[:m]
		c.st.observe(h, req, reply)
		_ = c.write(reply)
	}
}

func (c *Conn) outBuf(op uint32) *[]byte {
	switch op {
	case opRead, opReaddir, opReaddirplus, opIoctl, 22, 23: // 22, 23: GETXATTR, LISTXATTR
		return c.big.Get().(*[]byte) //nolint:forcetypeassert,errcheck // the pool holds only these
	}
	return c.small.Get().(*[]byte) //nolint:forcetypeassert,errcheck // the pool holds only these
}

func (c *Conn) putBuf(bp *[]byte) {
	if cap(*bp) == bufSize {
		c.big.Put(bp)
	} else {
		c.small.Put(bp)
	}
}

// call passes a request this package made up to the filesystem and returns its reply.
func (c *Conn) call(req []byte) []byte {
	out := make([]byte, smallSize)
	m, st := c.ps.HandleRequest([][]byte{req}, [][]byte{out})
	if !st.Ok() {
		return errorReply(0, syscall.EIO)
	}
	return out[:m]
}

// write sends a reply or notification. ENOENT (the request was interrupted) and ENODEV (the
// connection is gone) are expected and not reported.
func (c *Conn) write(b []byte) error {
	for {
		_, err := unix.Write(c.fd, b)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.EAGAIN):
			continue
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENODEV):
			return err
		}
		c.log.Error(err, "Could not write a FUSE reply", "bytes", len(b))
		return err
	}
}

// Stop stops reading requests and returns once every request read has been answered, except
// write opens held (HoldWriteOpens), which the kernel resends to the next server: the connection
// stays with whoever holds its descriptor, for a server that Resumes it. Wait then returns
// ErrStopped.
func (c *Conn) Stop() {
	c.holds.end(true)
	c.wakeMu.Lock()
	if c.wake >= 0 {
		_, _ = unix.Write(c.wake, le.AppendUint64(nil, 1))
	}
	c.wakeMu.Unlock()
	<-c.done
	if c.err == nil {
		c.err = ErrStopped
	}
}

// Wait blocks until the connection ends (unmounted or aborted: nil) or the server stops
// (ErrStopped) or fails. It does not close the descriptor.
func (c *Conn) Wait() error {
	<-c.done
	return c.err
}

// Done is closed when Wait would return.
func (c *Conn) Done() <-chan struct{} { return c.done }

// JournalErr is the error that made the journal stop describing the connection, if any: a
// connection with one can no longer be resumed.
func (c *Conn) JournalErr() error {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.j == nil {
		return nil
	}
	return c.st.j.err
}

// Writers is the number of files open for writing through this server, not counting handles a
// resume could not restore: their uploads are in this process, and a server that takes the
// connection over cannot carry them on.
func (c *Conn) Writers() int {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	n := 0
	for _, f := range c.st.files {
		if !f.dir && !f.stale && f.flags&syscall.O_ACCMODE != syscall.O_RDONLY {
			n++
		}
	}
	return n
}

// Resumable reports whether another server can take the connection over from the journal: there
// is one, and it still describes the connection.
func (c *Conn) Resumable() bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.j != nil && c.st.j.err == nil
}

func (c *Conn) close() {
	c.wakeMu.Lock()
	defer c.wakeMu.Unlock()
	if c.wake >= 0 {
		_ = unix.Close(c.wake)
		c.wake = -1
	}
}

func releaseIn(fh uint64) []byte {
	b := le.AppendUint64(nil, fh)
	return append(b, make([]byte, 16)...) // flags, release_flags, lock_owner
}
