package s3fs

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/semaphore"
)

// budget bounds the bytes held in read-ahead and upload buffers across all open files.
//
// Problem: 50 sequential readers each prefetching a growing window would exhaust memory.
// Solution: every buffer is reserved here first. Prefetch only tries (TryAcquire) and falls back
// to reading straight into the kernel's buffer; writers wait, bounded (acquireWithin), because they
// must buffer a part before uploading it.
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

// errInterrupted is acquireWithin's error when its caller's request was interrupted.
var errInterrupted = errors.New("interrupted while waiting for buffer memory")

// acquireWithin reserves n bytes, waiting at most wait for other files to give some back.
//
// Problem: the budget is held by buffers that fill only as their programs write; a program
// writing to more files than the budget has buffers for (awk with one output per key) waits for
// itself, for ever.
// Solution: a bounded wait, then ENOMEM, as mount-s3 answers when its memory limit is reached.
// Invariant: never waits longer than wait; an interrupt of ctx returns errInterrupted.
func (b *budget) acquireWithin(ctx context.Context, n int64, wait time.Duration) error {
	if n > b.limit {
		return fmt.Errorf("reserve %d buffer bytes: more than the memory target of %d bytes: %w", n, b.limit, syscall.ENOMEM)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := b.sem.Acquire(wctx, n); err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return fmt.Errorf("no buffer memory freed within %s: the files open for writing hold the memory target of %d bytes: %w",
			wait, b.limit, syscall.ENOMEM)
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
