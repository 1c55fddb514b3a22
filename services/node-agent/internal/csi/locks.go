package csi

import "sync"

// inflight refuses a second concurrent call for the same key (a target path).
//
// Problem: kubelet may retry a NodePublishVolume while the first is still waiting, and two
// calls working on one target could interleave a bind and an unmount.
// Solution: a call that finds its target busy is refused with ABORTED, which kubelet retries.
// Invariant: at most one call works on a target at a time.
type inflight struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

func newInflight() *inflight { return &inflight{keys: map[string]struct{}{}} }

// tryAcquire returns a release function, or false when key is busy.
func (f *inflight) tryAcquire(key string) (func(), bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, busy := f.keys[key]; busy {
		return nil, false
	}
	f.keys[key] = struct{}{}
	return func() {
		f.mu.Lock()
		delete(f.keys, key)
		f.mu.Unlock()
	}, true
}

// KeyedMutex serializes work per key (a Mountpoint Pod name) and forgets unused keys.
type KeyedMutex struct {
	mu    sync.Mutex
	locks map[string]*refLock
}

type refLock struct {
	mu   sync.Mutex
	refs int
}

// NewKeyedMutex returns an empty KeyedMutex.
func NewKeyedMutex() *KeyedMutex { return &KeyedMutex{locks: map[string]*refLock{}} }

// Lock blocks until key is free and returns its unlock function.
func (k *KeyedMutex) Lock(key string) func() {
	k.mu.Lock()
	l := k.locks[key]
	if l == nil {
		l = &refLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
