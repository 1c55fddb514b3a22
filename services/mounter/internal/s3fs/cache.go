package s3fs

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

const (
	// cacheBlockSize is the unit of the disk cache, mount-s3's default cache block size.
	cacheBlockSize = 1 << 20
	// cacheSubdir is the directory the cache owns inside --cache DIR; only it is emptied, so a
	// DIR holding other files (or a mistyped DIR such as /) loses nothing.
	cacheSubdir = "s3csi-mounter-cache"
	// cacheMetadataTTL is mount-s3's default --metadata-ttl when --cache is given.
	cacheMetadataTTL = 60 * time.Second
	// cacheFreePercent is the share of the cache's filesystem kept free without --max-cache-size.
	cacheFreePercent = 5
)

// metadataTTLDefault is the metadata TTL of a mount whose options do not set --metadata-ttl:
// like mount-s3, a mount with a data cache trusts metadata for a minute instead of a second.
func metadataTTLDefault(o *mountargs.Options) time.Duration {
	if o.CacheDir != "" {
		return cacheMetadataTTL
	}
	return defaultMetadataTTL
}

// diskCache keeps blocks of object content read from S3 in files under a local directory, so
// that rereading the same bytes of the same object version costs no request.
//
// Problem: a cached block must never be served for another version of its object, nor when its
// file was damaged, and concurrent readers of a missing block must not each fetch it.
// Solution: a block is named by a hash of (key, ETag, block index) and its file carries that
// identity, its length and CRC-32Cs of its data, checked on every load (a mismatch is a miss
// that drops the file); a missing block is fetched by the one reader that claims it while the
// others wait for that fetch (flights), and consecutive missing blocks of one read are fetched
// with one ranged GET. Fetched blocks are written in the background (storeRun).
// Invariant: the cache's files never total more than the limit (--max-cache-size): space is
// reserved, evicting least recently used blocks, before a file is written. The index lives in
// memory only: the directory is emptied when the cache opens and removed when it closes.
type diskCache struct {
	dir       string
	blockSize int64
	chunk     int64 // data covered by one checksum
	// limit bounds the bytes of the cache's files; 0 keeps cacheFreePercent of the filesystem free.
	limit int64
	// space returns the available and total bytes of the cache's filesystem.
	space func() (avail, total uint64, err error)

	// life is held shared while a block file is written and exclusively by close, so that no
	// file appears in the directory after close removed it.
	life   sync.RWMutex
	closed bool

	mu      sync.Mutex
	index   map[blockID]*cacheEntry
	lru     list.List // of *cacheEntry, most recently used first
	used    int64     // bytes of indexed files and reservations of files being written
	gen     uint64
	flights map[blockID]chan struct{}
	// pending holds fetched blocks until they are written; pendingBytes is their size.
	pending      map[blockID][]byte
	pendingBytes int64
	maxPending   int64
	stopped      bool           // no more background writes start
	writers      sync.WaitGroup // background writes

	hits    atomic.Int64 // blocks served from disk or from pending
	fetches atomic.Int64 // ranged GETs issued on misses
}

// cacheObject is the object version a cached read is for.
type cacheObject struct {
	key, etag string
	size      int64
}

// fetchFunc reads len(buf) bytes at off of the object version from S3, calling progress (when
// set) with the number of bytes of buf filled so far.
type fetchFunc func(ctx context.Context, buf []byte, off int64, progress func(int)) (int, error)

// openDiskCache empties (or creates) the cache's subdirectory of dir, which must exist, and
// returns a cache of it holding at most limit bytes (0: keep cacheFreePercent of the
// filesystem free).
func openDiskCache(dir string, limit, blockSize int64) (*diskCache, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("open cache directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("open cache directory %s: not a directory", dir)
	}
	own := filepath.Join(dir, cacheSubdir)
	if err := os.RemoveAll(own); err != nil {
		return nil, fmt.Errorf("empty cache directory: %w", err)
	}
	if err := os.Mkdir(own, 0o700); err != nil {
		return nil, fmt.Errorf("create cache directory: %w", err)
	}
	c := &diskCache{
		dir: own, blockSize: blockSize, chunk: min(cacheChunkSize, blockSize), limit: limit, space: statfsSpace(own),
		index: map[blockID]*cacheEntry{}, flights: map[blockID]chan struct{}{}, pending: map[blockID][]byte{},
		maxPending: maxPendingBytes,
	}
	return c, nil
}

func statfsSpace(dir string) func() (uint64, uint64, error) {
	return func() (uint64, uint64, error) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return 0, 0, fmt.Errorf("stat cache filesystem: %w", err)
		}
		bsize := uint64(st.Bsize) //nolint:gosec // block sizes are positive
		return st.Bavail * bsize, st.Blocks * bsize, nil
	}
}

// close waits for background writes, forgets every block and removes the cache's directory;
// later stores are dropped and later loads miss.
func (c *diskCache) close() error {
	c.life.Lock()
	c.closed = true // background writes still queued give up
	c.life.Unlock()
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.writers.Wait()
	c.life.Lock()
	defer c.life.Unlock()
	c.mu.Lock()
	c.index = map[blockID]*cacheEntry{}
	c.pending = map[blockID][]byte{}
	c.lru.Init()
	c.used = 0
	c.mu.Unlock()
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("remove cache directory: %w", err)
	}
	return nil
}

// read fills buf with the object's bytes at off, from cached blocks where it can and with
// fetch for the others, which it then caches. progress, when set, is called with the bytes of
// buf filled so far, in order. A read past the object's end fails with io.ErrUnexpectedEOF
// after filling what exists, as a ranged GET would.
func (c *diskCache) read(ctx context.Context, obj cacheObject, buf []byte, off int64, fetch fetchFunc, progress func(int)) (int, error) {
	end := min(off+int64(len(buf)), obj.size)
	filled := 0
	for i := off / c.blockSize; off < end && i*c.blockSize < end; {
		next, err := c.step(ctx, obj, i, buf, off, end, fetch, progress)
		if err != nil {
			return filled, err
		}
		if next > i {
			filled = int(min(next*c.blockSize, end) - off)
			if progress != nil {
				progress(filled)
			}
		}
		i = next
	}
	if filled < len(buf) {
		return filled, fmt.Errorf("read %s at %d: %w", obj.key, off, io.ErrUnexpectedEOF)
	}
	return filled, nil
}

// step serves block i of a read of [off, end) into buf: from disk, after waiting for another
// reader's fetch of it, or by fetching it with the missing blocks after it. It returns the
// next block to serve, i itself when the block must be looked up again.
func (c *diskCache) step(ctx context.Context, obj cacheObject, i int64, buf []byte, off, end int64, fetch fetchFunc, progress func(int)) (int64, error) {
	id := blockIDOf(obj, i)
	c.mu.Lock()
	if e := c.index[id]; e != nil {
		c.mu.Unlock()
		if c.load(e, obj, i, buf, off, end) {
			c.hits.Add(1)
			return i + 1, nil
		}
		return i, nil
	}
	if data := c.pending[id]; data != nil {
		c.mu.Unlock()
		bs := i * c.blockSize
		lo, hi := max(bs, off), min(bs+int64(len(data)), end)
		copy(buf[lo-off:hi-off], data[lo-bs:hi-bs])
		c.hits.Add(1)
		return i + 1, nil
	}
	if done := c.flights[id]; done != nil {
		c.mu.Unlock()
		select {
		case <-done:
			return i, nil
		case <-ctx.Done():
			return i, fmt.Errorf("wait for cached block of %s: %w", obj.key, ctx.Err())
		}
	}
	// Claim this block and the missing ones after it that the read needs.
	ids := []blockID{id}
	for j := i + 1; j*c.blockSize < end; j++ {
		next := blockIDOf(obj, j)
		if c.index[next] != nil || c.flights[next] != nil {
			break
		}
		ids = append(ids, next)
	}
	done := make(chan struct{})
	for _, id := range ids {
		c.flights[id] = done
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		for _, id := range ids {
			delete(c.flights, id)
		}
		c.mu.Unlock()
		close(done)
	}()
	if err := c.fetchRun(ctx, obj, i, ids, buf, off, end, fetch, progress); err != nil {
		return i, err
	}
	return i + int64(len(ids)), nil
}

// fetchRun fetches the consecutive blocks ids, the first being block i, with one ranged GET,
// stores them and copies the part of them that [off, end) covers into buf.
func (c *diskCache) fetchRun(ctx context.Context, obj cacheObject, i int64, ids []blockID, buf []byte, off, end int64, fetch fetchFunc, progress func(int)) error {
	rs := i * c.blockSize
	re := min(rs+int64(len(ids))*c.blockSize, obj.size)
	var dst []byte
	var prog func(int)
	inPlace := rs >= off && re <= end
	if inPlace {
		// The run lies inside buf (always so for aligned reads): fetch in place, streaming.
		dst = buf[rs-off : re-off]
		if progress != nil {
			prog = func(n int) { progress(int(rs-off) + n) }
		}
	} else {
		dst = make([]byte, re-rs)
	}
	c.fetches.Add(1)
	n, err := fetch(ctx, dst, rs, prog)
	if err == nil && n < len(dst) {
		err = fmt.Errorf("read %s at %d: %w", obj.key, rs, io.ErrUnexpectedEOF)
	}
	// Blocks that arrived whole are stored even when the GET failed after them (a read-ahead
	// part canceled by its window): their bytes may already have been served through progress.
	whole := len(ids)
	if n < len(dst) {
		whole = n / int(c.blockSize)
	}
	c.storeRun(ids[:whole], dst[:min(int64(whole)*c.blockSize, int64(len(dst)))], !inPlace)
	if err != nil {
		return err
	}
	if !inPlace {
		lo, hi := max(rs, off), min(re, end)
		copy(buf[lo-off:hi-off], dst[lo-rs:hi-rs])
	}
	return nil
}

// load copies the part of cached block i that [off, end) covers into buf, checking only the
// chunks it reads; false (the entry dropped) when its file is missing, short or fails its checks.
func (c *diskCache) load(e *cacheEntry, obj cacheObject, i int64, buf []byte, off, end int64) bool {
	bs, be := i*c.blockSize, min((i+1)*c.blockSize, obj.size)
	lo, hi := max(bs, off), min(be, end)
	// The chunks holding [lo, hi), relative to the block.
	clo := (lo - bs) / c.chunk * c.chunk
	chi := min((hi-bs+c.chunk-1)/c.chunk*c.chunk, be-bs)
	var ok bool
	if bs+clo >= off && bs+chi <= end {
		ok = c.readBlock(e, be-bs, clo, buf[bs+clo-off:bs+chi-off])
	} else {
		tmp := make([]byte, chi-clo)
		if ok = c.readBlock(e, be-bs, clo, tmp); ok {
			copy(buf[lo-off:hi-off], tmp[lo-bs-clo:hi-bs-clo])
		}
	}
	if !ok {
		c.drop(e)
		return false
	}
	c.mu.Lock()
	if c.index[e.id] == e {
		c.lru.MoveToFront(e.elem)
	}
	c.mu.Unlock()
	return true
}
