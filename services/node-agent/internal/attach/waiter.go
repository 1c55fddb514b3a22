// Package attach finds the Mountpoint Pod assigned to a workload pod's volume on this node,
// as recorded in the MountpointS3PodAttachments by the pod-reconciler.
package attach

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// DefaultFallback is the period of the fallback re-read when no event arrives.
const DefaultFallback = 2 * time.Second

// Key is what a NodePublishVolume waits for: a workload pod's assignment for a volume.
type Key struct {
	PodUID string
	PVName string
}

// Assignment is a found assignment.
type Assignment struct {
	// Attachment is the MountpointS3PodAttachment that records it.
	Attachment *s3csiv2.MountpointS3PodAttachment
	// MountpointPod is the name of the Mountpoint Pod serving the workload.
	MountpointPod string
}

// Reader lists attachments; it must read the API server, not a cache that may lag an event.
type Reader interface {
	List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error
}

// Recorder counts what the waiter does; nil-safe via noRecorder.
type Recorder interface {
	Wakeup(byEvent bool)
}

// Waiter waits for assignments. Notify wakes the waiters of a key, so an attachment.assigned
// event shortens the wait; without events the waiter re-reads every Fallback period.
//
// Problem: an event may be lost, late, duplicated or forged, and a cache may not yet hold the
// change an event announces.
// Solution: an event only triggers a re-read of the API server (server-side field selectors
// spec.nodeName and spec.persistentVolumeName), and a periodic re-read runs regardless.
// Invariant: the waiter acts only on what the API server says; events change only when.
type Waiter struct {
	node     string
	reader   Reader
	fallback time.Duration
	rec      Recorder

	mu      sync.Mutex
	waiters map[Key]map[chan struct{}]struct{}
}

// NewWaiter returns a Waiter for node's attachments; fallback <= 0 means DefaultFallback.
func NewWaiter(node string, reader Reader, fallback time.Duration, rec Recorder) *Waiter {
	if fallback <= 0 {
		fallback = DefaultFallback
	}
	if rec == nil {
		rec = noRecorder{}
	}
	return &Waiter{node: node, reader: reader, fallback: fallback, rec: rec, waiters: map[Key]map[chan struct{}]struct{}{}}
}

// Notify wakes every wait for key. It never blocks.
func (w *Waiter) Notify(key Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (w *Waiter) register(key Key) (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.waiters[key] == nil {
		w.waiters[key] = map[chan struct{}]struct{}{}
	}
	w.waiters[key][ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.waiters[key], ch)
		if len(w.waiters[key]) == 0 {
			delete(w.waiters, key)
		}
		w.mu.Unlock()
	}
}

// Wait returns the assignment of key whose attachment has volumeID, reading at once, on every
// Notify for key and every fallback period, until ctx ends.
func (w *Waiter) Wait(ctx context.Context, key Key, volumeID string) (*Assignment, error) {
	wake, unregister := w.register(key)
	defer unregister()
	ticker := time.NewTicker(w.fallback)
	defer ticker.Stop()
	log := logr.FromContextOrDiscard(ctx)
	for {
		a, err := w.Find(ctx, key, volumeID)
		if err != nil {
			return nil, err
		}
		if a != nil {
			return a, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the attachment of pod %s to volume %s on node %s: %w", key.PodUID, key.PVName, w.node, ctx.Err())
		case <-wake:
			w.rec.Wakeup(true)
			log.V(1).Info("Re-reading attachments after an event")
		case <-ticker.C:
			w.rec.Wakeup(false)
		}
	}
}

// Find reads the attachments of key's volume on this node once; nil when none holds the pod.
func (w *Waiter) Find(ctx context.Context, key Key, volumeID string) (*Assignment, error) {
	var list s3csiv2.MountpointS3PodAttachmentList
	sel := fields.AndSelectors(
		fields.OneTermEqualSelector(s3csiv2.FieldNodeName, w.node),
		fields.OneTermEqualSelector(s3csiv2.FieldPersistentVolumeName, key.PVName),
	)
	if err := w.reader.List(ctx, &list, client.MatchingFieldsSelector{Selector: sel}); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("list attachments of volume %s: %w", key.PVName, ctx.Err())
		}
		return nil, fmt.Errorf("list attachments of volume %s: %w", key.PVName, err)
	}
	for i := range list.Items {
		s3pa := &list.Items[i]
		// The server filtered already; checking again costs nothing and guards a reader that
		// ignores selectors.
		if s3pa.Spec.NodeName != w.node || s3pa.Spec.PersistentVolumeName != key.PVName {
			continue
		}
		if volumeID != "" && s3pa.Spec.VolumeID != volumeID {
			continue
		}
		for mp, workloads := range s3pa.Spec.MountpointS3PodAttachments {
			for _, wl := range workloads {
				if wl.WorkloadPodUID == key.PodUID {
					return &Assignment{Attachment: s3pa, MountpointPod: mp}, nil
				}
			}
		}
	}
	return nil, nil
}

type noRecorder struct{}

func (noRecorder) Wakeup(bool) {}
