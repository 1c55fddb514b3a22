// Package cleanup finds what the normal mount and unmount paths left behind and removes it
// safely: workload entries of pods that no longer exist, empty attachments, Mountpoint Pods that
// serve nobody, and the attachments and Mountpoint Pods of Nodes that are gone.
//
// Candidates come from informer caches, so a sweep of a large cluster costs the API server
// nothing when there is nothing to remove; every decision is then confirmed against the API
// server itself and written with a precondition (resourceVersion or UID), so a stale cache, a
// concurrent writer or a replayed event can delay a removal but never cause a wrong one.
package cleanup

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/keymutex"
)

// Reasons recorded in attachment.cleaned events and in the removed-objects metric.
const (
	// ReasonWorkloadGone: a workload entry whose pod no longer exists.
	ReasonWorkloadGone = "WorkloadGone"
	// ReasonEmptyAttachment: an attachment that serves no workload.
	ReasonEmptyAttachment = "EmptyAttachment"
	// ReasonNodeGone: an attachment or Mountpoint Pod of a Node that no longer exists.
	ReasonNodeGone = "NodeGone"
	// ReasonMountpointPodFinished: an unreferenced Mountpoint Pod that has exited.
	ReasonMountpointPodFinished = "MountpointPodFinished"
	// ReasonUnmountGraceExpired: an unreferenced Mountpoint Pod still running after the grace.
	ReasonUnmountGraceExpired = "UnmountGraceExpired"
	// ReasonOrphanMountpointPod: a Mountpoint Pod that no attachment references (the reason
	// given with its needs-unmount request).
	ReasonOrphanMountpointPod = "OrphanMountpointPod"
)

// AnnotationNeedsUnmountSince records, in RFC 3339, when a Mountpoint Pod was first seen asked
// to unmount while no attachment referenced it; the unmount grace runs from there, across
// restarts of the janitor.
const AnnotationNeedsUnmountSince = "s3.csi.scality.com/needs-unmount-since"

// Config is what the janitor is told; see the options of the same names.
type Config struct {
	MountpointNamespace string
	SweepInterval       time.Duration
	StaleAfter          time.Duration
	UnmountGrace        time.Duration
	NodeGoneGrace       time.Duration
	DryRun              bool
	// TriggerDelay is how long a targeted check waits after its signal (DefaultTriggerDelay
	// when zero).
	TriggerDelay time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Writer is the part of a client the janitor writes with. Every call is made with a
// precondition, so it fails with a Conflict (update, patch) or a Conflict/NotFound (delete)
// instead of overwriting or removing an object that changed since it was read.
type Writer interface {
	Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error
	Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error
	Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error
}

// Notifier publishes an event after the write it describes. Notify never blocks and never
// fails: events are hints and audit records, and NATS being down must not stop a cleanup.
type Notifier interface {
	Notify(id string, payload proto.Message)
}

// Janitor holds the cleanup rules. Its methods are safe for concurrent use; checks of the same
// node or Mountpoint Pod are serialized.
type Janitor struct {
	cfg     Config
	cache   client.Reader // informer caches: where candidates come from
	api     client.Reader // the API server: what every decision is confirmed against
	writer  Writer
	notify  Notifier
	metrics *Metrics
	log     logr.Logger

	locks keymutex.Mutex

	mu           sync.Mutex
	missingSince map[string]time.Time // node name -> first time the API server said it was gone
}

// New returns a Janitor. cache must serve the indexes Setup registers.
func New(cfg Config, cache, api client.Reader, writer Writer, notify Notifier, metrics *Metrics, log logr.Logger) *Janitor {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TriggerDelay <= 0 {
		cfg.TriggerDelay = DefaultTriggerDelay
	}
	return &Janitor{
		cfg: cfg, cache: cache, api: api, writer: writer, notify: notify, metrics: metrics,
		log: log, missingSince: map[string]time.Time{},
	}
}

// stale reports whether t is at least StaleAfter in the past. A zero time is stale.
func (j *Janitor) stale(t time.Time) bool {
	return !j.cfg.Now().Before(t.Add(j.cfg.StaleAfter))
}

// conflictAttempts bounds the passes of a check that keeps losing races to other writers;
// the next trigger or sweep starts over.
const conflictAttempts = 5

// onConflict runs fn again while it fails with a Conflict.
//
// Problem: client-go's retry.RetryOnConflict returns nil when fn fails with an error wrapping
// context.Canceled or DeadlineExceeded (it takes them for its own interruption), which would
// report a failed check as done.
// Solution: a loop of our own that returns fn's last error unchanged.
// Invariant: onConflict returns nil only when fn returned nil.
func onConflict(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = fn()
		if err == nil || !apierrors.IsConflict(err) || attempt == conflictAttempts {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
		}
	}
}
