package reconciler

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// recentWrites remembers the objects this process wrote, for a TTL, by name: the
// expectations of the controllers.
//
// Problem: the cache lags the API server. A workload reconciled right after the S3PA of its
// sharing key was created does not find that S3PA in the cache and would create a second one;
// an S3PA updated a moment ago is read with its old resourceVersion and the next update
// conflicts; an S3PA just deleted would still be offered to new workloads.
// Solution: every successful write (create, update, patch) stores the returned object, every
// delete a tombstone; reads overlay these on the cache. Entries expire after the TTL, when the
// cache has long caught up, and every deletion path replaces an entry with a tombstone.
// Invariant: under the sharing-key lock, this process reads its own writes; a write by another
// process shows up as a conflict, after which the caller stores the live object it re-read.
type recentWrites[T client.Object] struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[string]recentEntry[T]
}

type recentEntry[T client.Object] struct {
	obj     T // zero value: tombstone
	deleted bool
	expires time.Time
}

func newRecentWrites[T client.Object](ttl time.Duration) *recentWrites[T] {
	return &recentWrites[T]{ttl: ttl, now: time.Now, entries: map[string]recentEntry[T]{}}
}

// key is namespace/name so that one store can hold namespaced objects.
func recentKey(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }

// put records obj as the newest known state of its object.
func (r *recentWrites[T]) put(obj T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries[recentKey(obj)] = recentEntry[T]{obj: obj, expires: r.now().Add(r.ttl)}
}

// tombstone records that the object namespace/name was deleted.
func (r *recentWrites[T]) tombstone(namespace, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries[namespace+"/"+name] = recentEntry[T]{deleted: true, expires: r.now().Add(r.ttl)}
}

// get returns the recorded state of namespace/name: (obj, false, true) after a write,
// (zero, true, true) after a delete, ok false when nothing (unexpired) is recorded.
func (r *recentWrites[T]) get(namespace, name string) (obj T, deleted, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[namespace+"/"+name]
	if !ok || r.now().After(e.expires) {
		delete(r.entries, namespace+"/"+name)
		var zero T
		return zero, false, false
	}
	return e.obj, e.deleted, true
}

// overlay returns cached with this process's writes applied: deleted objects removed, written
// ones replaced by the written version, and written ones the cache lacks (that match keep)
// added. It also drops expired entries.
func (r *recentWrites[T]) overlay(cached []T, keep func(T) bool) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	seen := make(map[string]bool, len(cached))
	out := make([]T, 0, len(cached))
	for _, o := range cached {
		k := recentKey(o)
		seen[k] = true
		e, ok := r.entries[k]
		switch {
		case !ok || now.After(e.expires):
			out = append(out, o)
		case !e.deleted && keep(e.obj):
			out = append(out, e.obj)
		}
	}
	for k, e := range r.entries {
		if now.After(e.expires) {
			delete(r.entries, k)
			continue
		}
		if !e.deleted && !seen[k] && keep(e.obj) {
			out = append(out, e.obj)
		}
	}
	return out
}
