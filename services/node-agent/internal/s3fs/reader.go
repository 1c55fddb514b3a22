package s3fs

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

const (
	// maxWindowParts bounds how many parts one sequential reader keeps in flight.
	maxWindowParts = 8
	// seqSlack is how far a read may land from the expected offset and still count as
	// sequential: the kernel issues readahead requests concurrently and slightly out of order.
	seqSlack = 4 << 20
)

// part is one ranged GET of the read-ahead window.
type part struct {
	off  int64
	buf  []byte
	n    int
	err  error
	done chan struct{}
	stop context.CancelFunc
}

func (p *part) end() int64 { return p.off + int64(len(p.buf)) }

// reader reads one object version for one open handle.
//
// Problem: a GET per kernel read (128 KiB to 1 MiB) caps throughput at one round trip per read,
// while prefetching for random readers wastes bandwidth and memory.
// Solution: from the second read in a row near the previous end, reads are served from a window
// of parallel ranged GETs of ReadPartSize that doubles up to maxWindowParts as it is consumed;
// other reads are single ranged GETs into the kernel's buffer and reset the window to one part.
// Invariant: every window part holds a budget reservation until it is dropped, so reads never
// exceed the mount's memory target; without budget a read goes straight to S3.
type reader struct {
	fsys *filesystem
	key  string
	etag string
	size int64

	mu      sync.Mutex
	parts   []*part // contiguous, ascending
	nextOff int64   // where a sequential reader reads next
	window  int
	streak  int // consecutive reads near nextOff
	closed  bool
}

func newReader(fsys *filesystem, key string, e entry) *reader {
	return &reader{fsys: fsys, key: key, etag: e.etag, size: e.size, window: 1}
}

func (r *reader) read(ctx context.Context, dest []byte, off int64) (int, syscall.Errno) {
	if off >= r.size {
		return 0, 0
	}
	dest = dest[:min(int64(len(dest)), r.size-off)]
	r.mu.Lock()
	defer r.mu.Unlock()
	if off >= r.nextOff-seqSlack && off <= r.nextOff+seqSlack {
		r.streak++
	} else {
		r.streak = 0
	}
	// Prefetch only from the second read in a row near the previous end: a random reader that
	// happens to land close to its last read once does not start a window.
	if r.streak < 2 && !r.covers(off) {
		r.dropParts(0)
		r.window = 1
		r.nextOff = off + int64(len(dest))
		return r.direct(ctx, dest, off)
	}
	n := 0
	for n < len(dest) {
		cur := off + int64(n)
		r.dropBefore(cur)
		r.fill(cur) //nolint:contextcheck // prefetch outlives this read; it runs under the mount's context
		if len(r.parts) == 0 || r.parts[0].off > cur {
			m, errno := r.direct(ctx, dest[n:], cur)
			n += m
			if errno != 0 {
				return n, errno
			}
			break
		}
		p := r.parts[0]
		select {
		case <-p.done:
		case <-ctx.Done():
			return n, syscall.EINTR
		}
		if p.err != nil {
			r.dropParts(0)
			return n, toErrno(p.err)
		}
		n += copy(dest[n:], p.buf[cur-p.off:p.n])
	}
	if end := off + int64(n); end > r.nextOff {
		r.nextOff = end
	}
	return n, 0
}

func (r *reader) covers(off int64) bool {
	return len(r.parts) > 0 && off >= r.parts[0].off && off < r.parts[len(r.parts)-1].end()
}

// dropBefore releases parts that end at or before off and grows the window for each.
func (r *reader) dropBefore(off int64) {
	i := 0
	for i < len(r.parts) && r.parts[i].end() <= off {
		i++
	}
	if i > 0 {
		r.window = min(r.window*2, maxWindowParts)
		r.dropParts(i)
	}
	if len(r.parts) > 0 && off < r.parts[0].off {
		r.dropParts(len(r.parts))
	}
}

// dropParts releases the first k parts (all when k is 0).
func (r *reader) dropParts(k int) {
	if k == 0 {
		k = len(r.parts)
	}
	for _, p := range r.parts[:k] {
		r.releasePart(p)
	}
	r.parts = append(r.parts[:0], r.parts[k:]...)
}

func (r *reader) releasePart(p *part) {
	p.stop()
	fsys := r.fsys
	fsys.wg.Add(1)
	go func() {
		defer fsys.wg.Done()
		<-p.done
		fsys.putBuf(p.buf)
		fsys.budget.release(fsys.readPart)
	}()
}

// fill starts GETs until the window is full, the object ends or the budget is exhausted.
func (r *reader) fill(from int64) {
	next := from
	if len(r.parts) > 0 {
		next = r.parts[len(r.parts)-1].end()
	}
	for len(r.parts) < r.window && next < r.size && !r.closed {
		if !r.fsys.budget.tryAcquire(r.fsys.readPart) {
			return
		}
		length := min(r.fsys.readPart, r.size-next)
		ctx, cancel := r.fsys.background()
		p := &part{off: next, buf: r.fsys.getBuf()[:length], done: make(chan struct{}), stop: cancel}
		r.parts = append(r.parts, p)
		r.fsys.wg.Add(1)
		go func() {
			defer r.fsys.wg.Done()
			defer close(p.done)
			p.n, p.err = r.get(ctx, p.buf, p.off)
		}()
		next += length
	}
}

// direct reads into dest with one ranged GET.
func (r *reader) direct(ctx context.Context, dest []byte, off int64) (int, syscall.Errno) {
	rctx, cancel := r.fsys.requestContext(ctx)
	defer cancel()
	n, err := r.get(rctx, dest, off)
	return n, toErrno(err)
}

// get reads len(buf) bytes at off of the version opened, failing if the object changed.
func (r *reader) get(ctx context.Context, buf []byte, off int64) (int, error) {
	in := &s3.GetObjectInput{
		Bucket: aws.String(r.fsys.bucket),
		Key:    aws.String(r.key),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+int64(len(buf))-1)),
	}
	if r.etag != "" {
		in.IfMatch = aws.String(r.etag)
	}
	out, err := r.fsys.client.GetObject(ctx, in)
	if err != nil {
		return 0, fmt.Errorf("get %s at %d: %w", r.key, off, err)
	}
	defer out.Body.Close()
	n, err := io.ReadFull(out.Body, buf)
	if err != nil {
		return n, fmt.Errorf("read %s at %d: %w", r.key, off, err)
	}
	return n, nil
}

func (r *reader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	r.dropParts(0)
}
