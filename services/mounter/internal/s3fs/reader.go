package s3fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hanwen/go-fuse/v2/fuse"
)

const (
	// maxWindowParts bounds how many parts one sequential reader keeps ahead of its reads.
	maxWindowParts = 8
	// seqSlack is how far a read may land from the expected offset and still count as
	// sequential: the kernel issues readahead requests concurrently and go-fuse serves them
	// in any order. A part stays in the window until reads are seqSlack past its end, so a
	// request overtaken by the next one is still served from the window.
	seqSlack = 4 << 20
)

// reader reads one object version for one open handle.
//
// Problem: a GET per kernel read (128 KiB to 1 MiB) caps throughput at one round trip per read,
// while prefetching for random readers wastes bandwidth and memory.
// Solution: from the third read in a row that starts where an earlier one ended, reads are
// served from a window of parallel ranged GETs of ReadPartSize that doubles up to
// maxWindowParts as reads pass its parts; other reads are single ranged GETs of exactly the
// bytes asked, and a read far from the stream resets the window.
// The mutex guards only the window's bookkeeping: reads wait for their bytes and are answered
// outside it, so the kernel's concurrent readahead requests are served in parallel.
// Invariant: every window part holds a budget reservation until its last reference is dropped,
// so reads never exceed the mount's memory target; without budget a read goes straight to S3.
type reader struct {
	fsys *filesystem
	key  string
	etag string
	size int64

	mu      sync.Mutex
	parts   []*part // contiguous, ascending
	nextOff int64   // where a sequential reader reads next
	window  int
	streak  int // consecutive reads that continue the stream
	// ends are where the last reads ended; the kernel's concurrent readahead requests arrive
	// slightly out of order, so a stream continues from any of them.
	ends     [8]int64
	endsNext int
	// holes are the ranges behind nextOff the stream skipped: requests still on their way
	// (maxHoles at most, the oldest forgotten first).
	holes [][2]int64
	// strayed is set by a read far from the stream and cleared by one near it; strayEnd is
	// where the last far read ended.
	strayed  bool
	strayEnd int64
	closed   bool
}

// maxHoles bounds the skipped ranges a reader remembers; the kernel has at most a few dozen
// requests of one file in flight.
const maxHoles = 32

func newReader(fsys *filesystem, key string, e entry) *reader {
	return &reader{fsys: fsys, key: key, etag: e.etag, size: e.size, window: 1}
}

// read answers a kernel read of len(dest) bytes at off, from the window when the reader is
// sequential and otherwise with one ranged GET into dest.
func (r *reader) read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= r.size || len(dest) == 0 {
		return fuse.ReadResultData(nil), 0
	}
	dest = dest[:min(int64(len(dest)), r.size-off)]
	end := off + int64(len(dest))
	parts := r.plan(off, end) //nolint:contextcheck // prefetch outlives this read; it runs under the mount's context
	if parts == nil {
		return r.direct(ctx, dest, off)
	}
	if len(parts) == 1 {
		p := parts[0]
		if err := p.wait(ctx, int(end-p.off)); err != nil {
			p.unref()
			return r.failed(ctx, p, err, dest, off)
		}
		return &partResult{p: p, data: p.buf[off-p.off : end-p.off]}, 0
	}
	// A read across a part boundary is copied; kernel reads are aligned, so this is rare.
	defer func() {
		for _, p := range parts {
			p.unref()
		}
	}()
	n := 0
	for _, p := range parts {
		cur := off + int64(n)
		last := min(end, p.end())
		if err := p.wait(ctx, int(last-p.off)); err != nil {
			return r.failed(ctx, p, err, dest, off)
		}
		n += copy(dest[n:], p.buf[cur-p.off:last-p.off])
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// failed answers a read whose part failed: with a direct GET when the window dropped the part
// under it (a reader that jumped elsewhere), else with the part's error.
func (r *reader) failed(ctx context.Context, p *part, err error, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if ctx.Err() == nil && p.canceled() {
		return r.direct(ctx, dest, off)
	}
	return nil, toErrno(err)
}

// plan updates the sequential-read state for a read of [off, end) and returns the window parts
// covering it, each with a reference the caller drops, or nil to read directly.
func (r *reader) plan(off, end int64) []*part {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	// A read near the stream (within seqSlack of where it reads next) belongs to it: the
	// kernel's concurrent readahead requests arrive slightly out of order. It continues the
	// stream when it starts exactly where a recent read ended.
	if r.fillHole(off, end) && off < r.nextOff-seqSlack {
		// A request the stream skipped, descheduled while the stream went on: served on its
		// own, from the window if it still holds the bytes.
		return r.take(off, end)
	}
	if off < r.nextOff-seqSlack || off > r.nextOff+seqSlack {
		return r.far(off, end)
	}
	r.strayed = false
	if r.continues(off) {
		r.streak++
	}
	r.ended(end)
	if off > r.nextOff {
		r.addHole(r.nextOff, off)
	}
	r.nextOff = max(r.nextOff, end)
	// Prefetch only from the third read of a stream: a random reader never starts a window.
	if r.streak < 2 && !r.covers(off, end) {
		return nil
	}
	r.advance(off)
	r.fill(off)
	return r.take(off, end)
}

// far plans a read far from the stream that is not in a hole it skipped. The first in a row is
// a stray: a request the stream never skipped past (one that overtook the stream by more than
// the slack), or the reader's first read elsewhere. It is served on its own (from the window if
// it still holds the bytes) and changes nothing. The next far read shows the reader left: the
// window goes, and when that read continues the stray a new stream starts there.
func (r *reader) far(off, end int64) []*part {
	if !r.strayed {
		r.strayed, r.strayEnd = true, end
		return r.take(off, end)
	}
	r.streak = 0
	if off == r.strayEnd {
		r.streak = 1
	}
	r.strayEnd = end
	r.ended(end)
	r.nextOff = end
	r.holes = r.holes[:0]
	r.dropParts(len(r.parts))
	r.window = 1
	return nil
}

// addHole records that the stream skipped [off, end).
func (r *reader) addHole(off, end int64) {
	if n := len(r.holes); n >= maxHoles {
		r.holes = append(r.holes[:0], r.holes[n-maxHoles+1:]...)
	}
	r.holes = append(r.holes, [2]int64{off, end})
}

// fillHole removes [off, end) from the hole that holds it and reports whether one did.
func (r *reader) fillHole(off, end int64) bool {
	for i, h := range r.holes {
		if off < h[0] || end > h[1] {
			continue
		}
		r.holes = append(r.holes[:i], r.holes[i+1:]...)
		if h[0] < off {
			r.addHole(h[0], off)
		}
		if end < h[1] {
			r.addHole(end, h[1])
		}
		return true
	}
	return false
}

// ended records where a read ended.
func (r *reader) ended(end int64) {
	r.ends[r.endsNext%len(r.ends)] = end
	r.endsNext++
}

// continues reports whether off is where one of the last reads ended.
func (r *reader) continues(off int64) bool {
	for i := range min(r.endsNext, len(r.ends)) {
		if r.ends[i] == off {
			return true
		}
	}
	return false
}

func (r *reader) covers(off, end int64) bool {
	return len(r.parts) > 0 && off >= r.parts[0].off && end <= r.parts[len(r.parts)-1].end()
}

// advance doubles the window for every part reads went past, and drops parts that reads are
// seqSlack past.
func (r *reader) advance(off int64) {
	for _, p := range r.parts {
		if p.end() > off {
			break
		}
		if !p.passed {
			p.passed = true
			r.window = min(r.window*2, maxWindowParts)
		}
	}
	i := 0
	for i < len(r.parts) && r.parts[i].end() <= off-seqSlack {
		i++
	}
	r.dropParts(i)
}

// dropParts releases the window's reference to its first k parts; a part still downloading is
// canceled.
func (r *reader) dropParts(k int) {
	for _, p := range r.parts[:k] {
		p.stop()
		p.unref()
	}
	r.parts = append(r.parts[:0], r.parts[k:]...)
}

// fill starts GETs until window parts lie ahead of off, the object ends or the budget is
// exhausted. A read beyond the window (a skip within seqSlack) restarts it at off.
func (r *reader) fill(off int64) {
	next := off
	if n := len(r.parts); n > 0 {
		if last := r.parts[n-1].end(); last >= off {
			next = last
		} else {
			r.dropParts(n)
		}
	}
	ahead := 0
	for _, p := range r.parts {
		if p.end() > off {
			ahead++
		}
	}
	for ; ahead < r.window && next < r.size; ahead++ {
		if !r.fsys.budget.tryAcquire(r.fsys.readPart) {
			return
		}
		// Parts end on multiples of the part size, so the kernel's aligned requests rarely
		// straddle two parts (which costs a copy).
		length := min(r.fsys.readPart-next%r.fsys.readPart, r.size-next)
		ctx, cancel := r.fsys.background()
		p := newPart(r.fsys, next, length, cancel)
		r.parts = append(r.parts, p)
		r.fsys.wg.Add(1)
		go r.download(ctx, p)
		next += length
	}
}

func (r *reader) download(ctx context.Context, p *part) {
	defer r.fsys.wg.Done()
	defer p.unref()
	_, err := r.get(ctx, p.buf, p.off, p.progress)
	p.stop()
	p.finish(err)
}

// take returns the parts covering [off, end) with a reference each, or nil when the window
// does not cover it.
func (r *reader) take(off, end int64) []*part {
	if !r.covers(off, end) {
		return nil
	}
	var parts []*part
	for _, p := range r.parts {
		if p.end() > off && p.off < end {
			p.ref()
			parts = append(parts, p)
		}
	}
	return parts
}

// direct reads into dest with one ranged GET.
func (r *reader) direct(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	rctx, cancel := r.fsys.requestContext(ctx)
	defer cancel()
	n, err := r.get(rctx, dest, off, nil)
	if err != nil {
		return nil, toErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// get reads len(buf) bytes at off of the version opened, failing if the object changed.
// progress, when set, is told how many bytes have arrived after every read from the body.
func (r *reader) get(ctx context.Context, buf []byte, off int64, progress func(int)) (int, error) {
	if n, ok, err := r.cachedGet(ctx, buf, off, progress); ok {
		return n, err
	}
	in := &s3.GetObjectInput{
		Bucket: aws.String(r.fsys.bucket),
		Key:    aws.String(r.key),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+int64(len(buf))-1)),
	}
	if r.etag != "" {
		in.IfMatch = aws.String(r.etag)
	}
	r.fsys.stats.readRequests.Add(1)
	r.fsys.stats.readBytes.Add(int64(len(buf)))
	out, err := r.fsys.client.GetObject(ctx, in)
	if err != nil {
		return 0, fmt.Errorf("get %s at %d: %w", r.key, off, err)
	}
	defer out.Body.Close()
	n := 0
	if progress == nil {
		n, err = io.ReadFull(out.Body, buf)
	} else {
		for n < len(buf) && err == nil {
			var m int
			m, err = out.Body.Read(buf[n:])
			n += m
			progress(n)
		}
		if n == len(buf) {
			err = nil
		} else if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil {
		return n, fmt.Errorf("read %s at %d: %w", r.key, off, err)
	}
	return n, nil
}

func (r *reader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	r.dropParts(len(r.parts))
}
