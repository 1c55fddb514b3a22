package s3fs

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// budget bounds the bytes held in read-ahead and upload buffers across all open files.
//
// Problem: 50 sequential readers each prefetching a growing window would exhaust memory.
// Solution: every buffer is reserved here first. Prefetch only tries (TryAcquire) and falls back
// to reading straight into the kernel's buffer; writers wait (Acquire) because they must buffer a
// part before uploading it.
// Invariant: used never exceeds limit, so buffer memory stays under --max-memory-target.
type budget struct {
	limit int64
	sem   *semaphore.Weighted
	used  atomic.Int64
	peak  atomic.Int64
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, sem: semaphore.NewWeighted(limit)}
}

func (b *budget) tryAcquire(n int64) bool {
	if !b.sem.TryAcquire(n) {
		return false
	}
	b.account(n)
	return true
}

func (b *budget) acquire(ctx context.Context, n int64) error {
	if n > b.limit {
		return fmt.Errorf("reserve %d buffer bytes: more than the memory target %d", n, b.limit)
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		return fmt.Errorf("reserve buffer memory: %w", err)
	}
	b.account(n)
	return nil
}

func (b *budget) account(n int64) {
	used := b.used.Add(n)
	for {
		peak := b.peak.Load()
		if used <= peak || b.peak.CompareAndSwap(peak, used) {
			return
		}
	}
}

func (b *budget) release(n int64) {
	b.used.Add(-n)
	b.sem.Release(n)
}
