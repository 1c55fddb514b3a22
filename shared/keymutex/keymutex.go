// Package keymutex serializes work per key (a volume, a sharing key, a Mountpoint Pod, a node)
// without a global lock, and forgets keys that nobody holds or waits for.
package keymutex

import (
	"context"
	"fmt"
	"sync"
)

// Mutex is a set of mutexes, one per key. The zero value is ready to use.
//
// Problem: services act on one object from several goroutines (concurrent RPCs for one volume,
// reconciles of workloads sharing a key), and one global lock would serialize unrelated work.
// Solution: a lock per key, created on first use and dropped when its last holder or waiter
// leaves, so the set stays as small as the work in flight.
// Invariant: at most one holder per key; a key's entry exists only while it is held or awaited.
type Mutex struct {
	mu    sync.Mutex
	locks map[string]*entry
}

type entry struct {
	held chan struct{} // a token in the channel means the key is held
	refs int           // holders and waiters
}

// Lock blocks until key is free and returns the function that unlocks it.
func (m *Mutex) Lock(key string) (unlock func()) {
	e := m.ref(key)
	e.held <- struct{}{}
	return func() { m.release(key, e) }
}

// LockContext is Lock that gives up when ctx ends, returning ctx's error.
func (m *Mutex) LockContext(ctx context.Context, key string) (unlock func(), err error) {
	e := m.ref(key)
	select {
	case e.held <- struct{}{}:
		return func() { m.release(key, e) }, nil
	case <-ctx.Done():
		m.unref(key, e)
		return nil, fmt.Errorf("wait for lock on %s: %w", key, ctx.Err())
	}
}

// Len is the number of keys held or awaited.
func (m *Mutex) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.locks)
}

func (m *Mutex) ref(key string) *entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks == nil {
		m.locks = map[string]*entry{}
	}
	e := m.locks[key]
	if e == nil {
		e = &entry{held: make(chan struct{}, 1)}
		m.locks[key] = e
	}
	e.refs++
	return e
}

func (m *Mutex) release(key string, e *entry) {
	<-e.held
	m.unref(key, e)
}

func (m *Mutex) unref(key string, e *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(m.locks, key)
	}
}
