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
