package s3fs

import "bytes"

// maxPendingBytes bounds the fetched data waiting to be written to the cache.
const maxPendingBytes = 32 << 20

// storeRun caches the consecutive blocks ids, whose data lies back to back in data (the last
// block possibly shorter). owned says whether the cache may keep data.
//
// Problem: writing fetched blocks to disk before the read that fetched them goes on halved the
// throughput of cold sequential reads (measured with BenchmarkCacheSequentialRead).
// Solution: blocks are written by a background goroutine, from a copy of data (or data itself
// when owned), which also answers reads of those blocks until they are on disk; when more than
// maxPending bytes would wait, the caller writes them itself.
// Invariant: a block is in pending from before its flight ends until it is indexed (or failed
// to be written), so a reader looking for it finds it in flights, pending or the index, or
// fetches it.
func (c *diskCache) storeRun(ids []blockID, data []byte, owned bool) {
	if len(ids) == 0 {
		return
	}
	size := int64(len(data))
	c.mu.Lock()
	async := !c.stopped && c.pendingBytes+size <= c.maxPending
	if async {
		c.pendingBytes += size
		c.writers.Add(1)
	}
	c.mu.Unlock()
	if !async {
		for k, id := range ids {
			c.store(id, c.blockOf(data, k))
		}
		return
	}
	if !owned {
		data = bytes.Clone(data)
	}
	c.mu.Lock()
	for k, id := range ids {
		c.pending[id] = c.blockOf(data, k)
	}
	c.mu.Unlock()
	go func() {
		defer c.writers.Done()
		for k, id := range ids {
			c.store(id, c.blockOf(data, k))
			c.mu.Lock()
			delete(c.pending, id)
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.pendingBytes -= size
		c.mu.Unlock()
	}()
}

// blockOf returns the k-th block of data holding consecutive blocks.
func (c *diskCache) blockOf(data []byte, k int) []byte {
	lo := int64(k) * c.blockSize
	return data[lo:min(lo+c.blockSize, int64(len(data)))]
}
