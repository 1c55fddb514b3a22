package s3fs

import (
	"context"
	"errors"
	"io"
	"math"
	"sync"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// part is one ranged GET of a sequential reader's read-ahead window, readable while it downloads.
//
// Problem: copying every kernel read out of the part into go-fuse's buffer costs a memmove per
// byte served, and waiting for a whole part before serving its first byte stalls a reader that
// has just started or caught up with the window.
// Solution: reads are answered with slices of the part's buffer (partResult), and a read waits
// only until the bytes it needs have arrived (avail).
// Invariant: the buffer and its budget reservation are released when the last reference is
// dropped: one held by the window until the part leaves it, one by the download goroutine until
// it returns, one by each reply that go-fuse has not written to the kernel yet.
type part struct {
	fsys *filesystem
	off  int64
	buf  []byte
	stop context.CancelFunc
	refs atomic.Int32

	mu       sync.Mutex
	cond     sync.Cond
	avail    int // bytes of buf received so far
	finished bool
	err      error
	// wake is the least avail a waiting read needs: progress wakes readers only once it is
	// reached, not at every read from the connection.
	wake   int
	passed bool // a read went past the part's end; guarded by the reader's mutex
}

func newPart(fsys *filesystem, off, length int64, stop context.CancelFunc) *part {
	p := &part{fsys: fsys, off: off, buf: fsys.getBuf()[:length], stop: stop, wake: math.MaxInt}
	p.cond.L = &p.mu
	p.refs.Store(2) // the window and the download
	return p
}

func (p *part) end() int64 { return p.off + int64(len(p.buf)) }

func (p *part) ref() { p.refs.Add(1) }

func (p *part) unref() {
	if p.refs.Add(-1) == 0 {
		p.fsys.putBuf(p.buf)
		p.fsys.budget.release(p.fsys.readPart)
	}
}

// progress publishes that the first n bytes of buf have arrived.
func (p *part) progress(n int) {
	p.mu.Lock()
	p.avail = n
	if n >= p.wake {
		p.wake = math.MaxInt // woken readers still short of their bytes set it again
		p.cond.Broadcast()
	}
	p.mu.Unlock()
}

func (p *part) finish(err error) {
	p.mu.Lock()
	p.finished, p.err = true, err
	p.cond.Broadcast()
	p.mu.Unlock()
}

// wait blocks until the first need bytes of the part have arrived, the download failed or ctx
// is done.
func (p *part) wait(ctx context.Context, need int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.avail < need && !p.finished {
		wake := context.AfterFunc(ctx, func() {
			p.mu.Lock()
			p.cond.Broadcast()
			p.mu.Unlock()
		})
		defer wake()
		for p.avail < need && !p.finished && ctx.Err() == nil {
			p.wake = min(p.wake, need)
			p.cond.Wait()
		}
	}
	switch {
	case p.avail >= need:
		return nil
	case p.err != nil:
		return p.err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return io.ErrUnexpectedEOF
}

// canceled reports whether the part failed only because the window dropped it.
func (p *part) canceled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Is(p.err, context.Canceled)
}

// partResult answers a read with a slice of a part's buffer, holding a reference to the part
// until go-fuse has written the reply to the kernel.
//
// Slices makes go-fuse write the slice with writev and call Done afterwards, also when splicing
// is disabled (a plain Bytes result is released before it is written).
type partResult struct {
	p    *part
	data []byte
}

var _ fuse.ReadResult = (*partResult)(nil)

func (r *partResult) Bytes([]byte) ([]byte, fuse.Status) { return r.data, fuse.OK }

func (r *partResult) Slices() ([][]byte, fuse.Status) { return [][]byte{r.data}, fuse.OK }

func (r *partResult) Size() int { return len(r.data) }

func (r *partResult) Done() {
	if r.p != nil {
		r.p.unref()
		r.p = nil
	}
}
