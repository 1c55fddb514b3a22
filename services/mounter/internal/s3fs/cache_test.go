package s3fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testBlock and testChunk are the block and checksum chunk sizes of the unit tests: small, so
// that objects span many blocks and blocks many chunks.
const (
	testBlock = 16
	testChunk = 4
)

// fakeObject serves an object's content as ranged GETs would, counting them.
type fakeObject struct {
	data  []byte
	gets  atomic.Int64
	fail  error
	delay chan struct{} // when set, a GET waits for it (or its context)
	// cut, when positive, makes a GET fail after delivering its first cut bytes.
	cut int
}

func (o *fakeObject) fetch(ctx context.Context, buf []byte, off int64, progress func(int)) (int, error) {
	o.gets.Add(1)
	if o.delay != nil {
		select {
		case <-o.delay:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if o.fail != nil {
		return 0, o.fail
	}
	if off+int64(len(buf)) > int64(len(o.data)) {
		return 0, fmt.Errorf("range %d+%d beyond %d", off, len(buf), len(o.data))
	}
	n := copy(buf, o.data[off:])
	if o.cut > 0 && o.cut < n {
		n = o.cut
		if progress != nil {
			progress(n)
		}
		return n, context.Canceled
	}
	if progress != nil {
		progress(n)
	}
	return n, nil
}

func newTestCache(t *testing.T, limit int64) *diskCache {
	t.Helper()
	c, err := openDiskCache(t.TempDir(), limit, testBlock)
	if err != nil {
		t.Fatal(err)
	}
	c.chunk = testChunk
	t.Cleanup(func() { _ = c.close() })
	return c
}

// cacheRead reads n bytes at off of obj through c and checks them against the object.
func cacheRead(t *testing.T, c *diskCache, obj cacheObject, o *fakeObject, off, n int64) {
	t.Helper()
	buf := make([]byte, n)
	got, err := c.read(context.Background(), obj, buf, off, o.fetch, nil)
	if err != nil {
		t.Fatalf("read %d at %d: %v", n, off, err)
	}
	if !bytes.Equal(buf[:got], o.data[off:off+n]) || got != int(n) {
		t.Fatalf("read %d at %d returned other bytes (%d)", n, off, got)
	}
	settle(c)
}

// settle waits until every block written in the background is on disk.
func settle(c *diskCache) {
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// diskBytes is the size of the files in the cache's directory.
func diskBytes(t *testing.T, c *diskCache) int64 {
	t.Helper()
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		total += info.Size()
	}
	return total
}

func TestCacheReadsMatchTheObjectAndRereadsFetchNothing(t *testing.T) {
	const size = 100 // six full blocks and a short one of 4 bytes
	tests := []struct {
		name      string
		off, n    int64
		wantFetch int64
	}{
		{name: "an aligned block", off: 16, n: 16, wantFetch: 1},
		{name: "a read inside one block", off: 20, n: 5, wantFetch: 1},
		{name: "an unaligned read across two blocks", off: 30, n: 4, wantFetch: 1},
		{name: "a read larger than a block", off: 7, n: 50, wantFetch: 1},
		{name: "the last short block", off: 96, n: 4, wantFetch: 1},
		{name: "a read ending in the last short block", off: 90, n: 10, wantFetch: 1},
		{name: "the whole object", off: 0, n: size, wantFetch: 1},
	}
	for _, tc := range tests {
		for _, background := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, written in the background %v", tc.name, background), func(t *testing.T) {
				c := newTestCache(t, 0)
				if !background {
					c.maxPending = 0 // every write waits: the backpressure path
				}
				o := &fakeObject{data: pattern(size, 1)}
				obj := cacheObject{key: "k", etag: `"1"`, size: size}
				cacheRead(t, c, obj, o, tc.off, tc.n)
				if got := o.gets.Load(); got != tc.wantFetch {
					t.Fatalf("first read sent %d GETs, want %d", got, tc.wantFetch)
				}
				cacheRead(t, c, obj, o, tc.off, tc.n)
				if got := o.gets.Load(); got != tc.wantFetch {
					t.Fatalf("reread sent %d more GETs, want 0", got-tc.wantFetch)
				}
			})
		}
	}
}

func TestCacheServesBlocksWaitingToBeWritten(t *testing.T) {
	c := newTestCache(t, 0)
	o := &fakeObject{data: pattern(3*testBlock, 18)}
	obj := cacheObject{key: "k", etag: "e", size: 3 * testBlock}
	c.life.Lock() // holds the background writes back
	for i := range 2 {
		buf := make([]byte, 3*testBlock)
		if _, err := c.read(context.Background(), obj, buf, 0, o.fetch, nil); err != nil || !bytes.Equal(buf, o.data) {
			c.life.Unlock()
			t.Fatalf("read %d: %v, or other bytes", i, err)
		}
	}
	c.mu.Lock()
	pending := len(c.pending)
	c.mu.Unlock()
	c.life.Unlock()
	if pending != 3 || o.gets.Load() != 1 {
		t.Fatalf("%d blocks pending and %d GETs, want 3 blocks served from memory after 1 GET", pending, o.gets.Load())
	}
	settle(c)
	if len(c.index) != 3 {
		t.Fatalf("%d blocks on disk after the writes, want 3", len(c.index))
	}
}

func TestCacheFetchesOnlyMissingBlocks(t *testing.T) {
	c := newTestCache(t, 0)
	o := &fakeObject{data: pattern(100, 2)}
	obj := cacheObject{key: "k", etag: `"1"`, size: 100}
	cacheRead(t, c, obj, o, 32, 16) // block 2
	cacheRead(t, c, obj, o, 0, 100) // blocks 0-1 and 3-6: two runs around the cached block
	if got := o.gets.Load(); got != 3 {
		t.Fatalf("sent %d GETs, want 3", got)
	}
	if got := c.hits.Load(); got != 1 {
		t.Fatalf("served %d blocks from disk, want 1", got)
	}
}

func TestCacheReadPastTheEndFails(t *testing.T) {
	c := newTestCache(t, 0)
	o := &fakeObject{data: pattern(40, 3)}
	buf := make([]byte, 20)
	n, err := c.read(context.Background(), cacheObject{key: "k", etag: "e", size: 40}, buf, 30, o.fetch, nil)
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != 10 || !bytes.Equal(buf[:n], o.data[30:]) {
		t.Fatalf("read past the end = %d, %v; want the 10 bytes left and io.ErrUnexpectedEOF", n, err)
	}
}

func TestCacheNeverServesAnotherVersion(t *testing.T) {
	c := newTestCache(t, 0)
	v1 := &fakeObject{data: pattern(64, 4)}
	v2 := &fakeObject{data: pattern(64, 5)}
	cacheRead(t, c, cacheObject{key: "k", etag: `"v1"`, size: 64}, v1, 0, 64)
	cacheRead(t, c, cacheObject{key: "k", etag: `"v2"`, size: 64}, v2, 0, 64)
	if v2.gets.Load() != 1 {
		t.Fatalf("the new version was fetched with %d GETs, want 1", v2.gets.Load())
	}
	// Another key with the first key's ETag is another object too.
	other := &fakeObject{data: pattern(64, 6)}
	cacheRead(t, c, cacheObject{key: "k2", etag: `"v1"`, size: 64}, other, 0, 64)
	if other.gets.Load() != 1 {
		t.Fatal("another key was served from the first key's blocks")
	}
}

func TestCacheEvictsLeastRecentlyUsedBlocks(t *testing.T) {
	file := testBlock + (&diskCache{blockSize: testBlock, chunk: testChunk}).header()
	c := newTestCache(t, 3*file)
	o := &fakeObject{data: pattern(10*testBlock, 7)}
	obj := cacheObject{key: "k", etag: "e", size: 10 * testBlock}
	for _, b := range []int64{0, 1, 2, 0, 3} { // block 0 is used again before block 3 arrives
		cacheRead(t, c, obj, o, b*testBlock, testBlock)
	}
	if got := o.gets.Load(); got != 4 {
		t.Fatalf("sent %d GETs, want 4", got)
	}
	cacheRead(t, c, obj, o, 0, testBlock) // still cached
	if got := o.gets.Load(); got != 4 {
		t.Fatal("the recently used block 0 was evicted")
	}
	cacheRead(t, c, obj, o, testBlock, testBlock) // evicted for block 3
	if got := o.gets.Load(); got != 5 {
		t.Fatal("block 1, the least recently used, was not evicted")
	}
	// A read of the whole object, larger than the cache, leaves it within its limit.
	cacheRead(t, c, obj, o, 0, 10*testBlock)
	if got := diskBytes(t, c); got > 3*file || c.used > 3*file {
		t.Fatalf("cache holds %d bytes on disk (%d counted), limit %d", got, c.used, 3*file)
	}
}

func TestCacheKeepsFivePercentFree(t *testing.T) {
	c := newTestCache(t, 0)
	file := testBlock + c.header()
	// A filesystem of 100 files' worth with 10 free before the cache writes anything.
	c.space = func() (uint64, uint64, error) {
		return uint64(10*file - c.used), uint64(100 * file), nil //nolint:gosec // test sizes
	}
	o := &fakeObject{data: pattern(20*testBlock, 8)}
	cacheRead(t, c, cacheObject{key: "k", etag: "e", size: 20 * testBlock}, o, 0, 20*testBlock)
	if c.used > 5*file || c.used == 0 {
		t.Fatalf("cache holds %d bytes, want some and at most %d (5%% kept free)", c.used, 5*file)
	}
}

func TestCacheRefetchesDamagedBlocks(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string, header int64)
	}{
		{name: "a flipped data byte", damage: func(t *testing.T, path string, header int64) { flipByte(t, path, header+3) }},
		{name: "a flipped length byte", damage: func(t *testing.T, path string, _ int64) { flipByte(t, path, 9) }},
		{name: "a flipped identity byte", damage: func(t *testing.T, path string, _ int64) { flipByte(t, path, 20) }},
		{name: "a flipped checksum byte", damage: func(t *testing.T, path string, header int64) { flipByte(t, path, header-1) }},
		{name: "a truncated file", damage: func(t *testing.T, path string, header int64) { mustDo(t, os.Truncate(path, header+5)) }},
		{name: "an empty file", damage: func(t *testing.T, path string, _ int64) { mustDo(t, os.Truncate(path, 0)) }},
		{name: "a removed file", damage: func(t *testing.T, path string, _ int64) { mustDo(t, os.Remove(path)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(t, 0)
			o := &fakeObject{data: pattern(testBlock, 9)}
			obj := cacheObject{key: "k", etag: "e", size: testBlock}
			cacheRead(t, c, obj, o, 0, testBlock)
			tc.damage(t, c.index[blockIDOf(obj, 0)].path, c.header())
			cacheRead(t, c, obj, o, 0, testBlock)
			cacheRead(t, c, obj, o, 0, testBlock)
			if got := o.gets.Load(); got != 2 {
				t.Fatalf("sent %d GETs, want 2: the damaged block refetched once and cached again", got)
			}
		})
	}
}

func TestCacheChecksOnlyTheChunksARereadReads(t *testing.T) {
	c := newTestCache(t, 0)
	o := &fakeObject{data: pattern(testBlock, 17)}
	obj := cacheObject{key: "k", etag: "e", size: testBlock}
	cacheRead(t, c, obj, o, 0, testBlock)
	flipByte(t, c.index[blockIDOf(obj, 0)].path, c.header()+3*testChunk+1) // the last chunk
	cacheRead(t, c, obj, o, 1, 2*testChunk)                                // chunks 0-2
	if got := o.gets.Load(); got != 1 {
		t.Fatalf("a read of intact chunks sent %d more GETs, want 0", got-1)
	}
	cacheRead(t, c, obj, o, 3*testChunk+2, 1) // the damaged chunk
	if got := o.gets.Load(); got != 2 {
		t.Fatalf("a read of the damaged chunk sent %d more GETs, want 1", got-1)
	}
}

func TestCacheDoesNotServeABlockFileOfAnotherBlock(t *testing.T) {
	c := newTestCache(t, 0)
	o := &fakeObject{data: pattern(2*testBlock, 10)}
	obj := cacheObject{key: "k", etag: "e", size: 2 * testBlock}
	cacheRead(t, c, obj, o, 0, 2*testBlock)
	// Block 1's file replaced by block 0's, which is intact but another block.
	b0, b1 := c.index[blockIDOf(obj, 0)].path, c.index[blockIDOf(obj, 1)].path
	content, err := os.ReadFile(b0)
	mustDo(t, err)
	mustDo(t, os.WriteFile(b1, content, 0o600))
	cacheRead(t, c, obj, o, testBlock, testBlock)
	if got := o.gets.Load(); got != 2 {
		t.Fatalf("sent %d GETs, want 2", got)
	}
}

func TestCacheConcurrentReadersOfABlockFetchItOnce(t *testing.T) {
	c := newTestCache(t, 0)
	o := &fakeObject{data: pattern(4*testBlock, 11), delay: make(chan struct{})}
	obj := cacheObject{key: "k", etag: "e", size: 4 * testBlock}
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			buf := make([]byte, 2*testBlock)
			_, err := c.read(context.Background(), obj, buf, testBlock, o.fetch, nil)
			if err == nil && !bytes.Equal(buf, o.data[testBlock:3*testBlock]) {
				err = errors.New("wrong bytes")
			}
			errs <- err
		})
	}
	time.Sleep(50 * time.Millisecond) // let every reader find the flight
	close(o.delay)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("reader: %v", err)
		}
	}
	if got := o.gets.Load(); got != 1 {
		t.Fatalf("8 concurrent readers sent %d GETs, want 1", got)
	}
}

func TestCacheWaiterFetchesWhenTheFetchingReaderGivesUp(t *testing.T) {
	c := newTestCache(t, 0)
	o := &fakeObject{data: pattern(testBlock, 12), delay: make(chan struct{})}
	obj := cacheObject{key: "k", etag: "e", size: testBlock}
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.read(ctx, obj, make([]byte, testBlock), 0, o.fetch, nil)
		first <- err
	}()
	for o.gets.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() {
		buf := make([]byte, testBlock)
		_, err := c.read(context.Background(), obj, buf, 0, o.fetch, nil)
		if err == nil && !bytes.Equal(buf, o.data) {
			err = errors.New("wrong bytes")
		}
		second <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled reader: %v, want context.Canceled", err)
	}
	close(o.delay)
	if err := <-second; err != nil {
		t.Fatalf("waiting reader: %v", err)
	}
}

func TestCacheFailedFetchIsNotCached(t *testing.T) {
	c := newTestCache(t, 0)
	o := &fakeObject{data: pattern(testBlock, 13), fail: errors.New("precondition failed")}
	obj := cacheObject{key: "k", etag: "e", size: testBlock}
	if _, err := c.read(context.Background(), obj, make([]byte, testBlock), 0, o.fetch, nil); err == nil {
		t.Fatal("a failed GET did not fail the read")
	}
	o.fail = nil
	cacheRead(t, c, obj, o, 0, testBlock)
	if got := o.gets.Load(); got != 2 {
		t.Fatalf("sent %d GETs, want 2", got)
	}
}

func TestCacheKeepsTheWholeBlocksOfAnInterruptedGET(t *testing.T) {
	c := newTestCache(t, 0)
	o := &fakeObject{data: pattern(4*testBlock, 16), cut: 2*testBlock + testBlock/2}
	obj := cacheObject{key: "k", etag: "e", size: 4 * testBlock}
	var served int
	_, err := c.read(context.Background(), obj, make([]byte, 4*testBlock), 0, o.fetch, func(n int) { served = n })
	if !errors.Is(err, context.Canceled) || served != o.cut {
		t.Fatalf("interrupted read: %v after %d bytes, want context.Canceled after %d", err, served, o.cut)
	}
	o.cut = 0
	cacheRead(t, c, obj, o, 0, 2*testBlock)
	if got := o.gets.Load(); got != 1 {
		t.Fatalf("reading the blocks that had arrived sent %d more GETs, want 0", got-1)
	}
	cacheRead(t, c, obj, o, 2*testBlock, 2*testBlock)
	if got := o.gets.Load(); got != 2 {
		t.Fatalf("reading the rest sent %d more GETs, want 1", got-1)
	}
}

func TestCacheReportsProgressInOrder(t *testing.T) {
	c := newTestCache(t, 0)
	o := &fakeObject{data: pattern(100, 14)}
	obj := cacheObject{key: "k", etag: "e", size: 100}
	cacheRead(t, c, obj, o, 32, 16)
	var seen []int
	buf := make([]byte, 100)
	if _, err := c.read(context.Background(), obj, buf, 0, o.fetch, func(n int) { seen = append(seen, n) }); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Fatalf("progress went back: %v", seen)
		}
	}
	if len(seen) == 0 || seen[len(seen)-1] != 100 || !bytes.Equal(buf, o.data) {
		t.Fatalf("progress %v, want it to end at 100 with the object's bytes", seen)
	}
}

func TestCacheDirectoryIsEmptiedAtOpenAndRemovedAtClose(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, cacheSubdir)
	mustDo(t, os.MkdirAll(filepath.Join(own, "old"), 0o700))
	mustDo(t, os.WriteFile(filepath.Join(own, "old", "block"), []byte("stale"), 0o600))
	mustDo(t, os.WriteFile(filepath.Join(dir, "keep"), []byte("not the cache's"), 0o600))
	c, err := openDiskCache(dir, 0, testBlock)
	mustDo(t, err)
	if ents, _ := os.ReadDir(own); len(ents) != 0 {
		t.Fatalf("cache directory holds %d entries after open, want 0", len(ents))
	}
	if st, err := os.Stat(own); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("cache directory: %v %v, want mode 0700", st, err)
	}
	o := &fakeObject{data: pattern(testBlock, 15)}
	cacheRead(t, c, cacheObject{key: "k", etag: "e", size: testBlock}, o, 0, testBlock)
	mustDo(t, c.close())
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		t.Fatalf("cache directory after close: %v, want it removed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Fatalf("a file beside the cache directory was removed: %v", err)
	}
	// A read after close still answers, from S3.
	cacheRead(t, c, cacheObject{key: "k", etag: "e", size: testBlock}, o, 0, testBlock)
}

func TestCacheOpenFailsWithoutItsDirectory(t *testing.T) {
	if _, err := openDiskCache(filepath.Join(t.TempDir(), "missing"), 0, testBlock); err == nil {
		t.Fatal("opened a cache in a missing directory")
	}
}

func flipByte(t *testing.T, path string, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	mustDo(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, at)
	mustDo(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b, at)
	mustDo(t, err)
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
