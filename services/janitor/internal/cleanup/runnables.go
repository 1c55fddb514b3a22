package cleanup

import (
	"context"
	"fmt"
	"sync"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
)

// DefaultTriggerDelay is how long a targeted check waits after the signal that triggered it, so
// that the normal path (the pod-reconciler reacting to the same change) goes first and the
// janitor only removes what it left behind.
const DefaultTriggerDelay = 5 * time.Second

// Sweeper is the runnable that sweeps every SweepInterval. It needs leader election.
type Sweeper struct {
	j *Janitor
}

// NewSweeper returns the periodic sweep of j.
func NewSweeper(j *Janitor) *Sweeper { return &Sweeper{j: j} }

// NeedLeaderElection is true: two replicas sweeping at once could each remove what the other
// just decided to keep.
func (*Sweeper) NeedLeaderElection() bool { return true }

// Start sweeps at once, then every SweepInterval, until ctx is done.
func (s *Sweeper) Start(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := s.j.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.j.log.Error(err, "Sweep failed; the next sweep retries", "in", s.j.cfg.SweepInterval)
		}
		t.Reset(s.j.cfg.SweepInterval)
	}
}

// targetKind says what a queued check is about.
type targetKind int

const (
	targetNode targetKind = iota
	targetMountpointPod
)

type target struct {
	kind targetKind
	name string
}

// Triggers is the runnable that runs targeted checks soon after a signal: a pod or Node deleted
// (informers), or an event on the bus (HandleEvent). It needs leader election.
type Triggers struct {
	j         *Janitor
	informers cache.Informers
	delay     time.Duration

	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[target]
	// ready is closed once Start watches deletions.
	ready chan struct{}
}

// NewTriggers returns the targeted checks of j, fed by the pod and Node informers of informers.
func NewTriggers(j *Janitor, informers cache.Informers) *Triggers {
	return &Triggers{j: j, informers: informers, delay: j.cfg.TriggerDelay, ready: make(chan struct{})}
}

// NeedLeaderElection is true, as for the Sweeper.
func (*Triggers) NeedLeaderElection() bool { return true }

// Start watches pod and Node deletions and runs queued checks one at a time until ctx is done.
func (t *Triggers) Start(ctx context.Context) error {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[target](),
		workqueue.TypedRateLimitingQueueConfig[target]{})
	defer q.ShutDown()
	t.mu.Lock()
	t.queue = q
	t.mu.Unlock()
	for obj, handler := range map[client.Object]func(any){newPodMeta(): t.podDeleted, newNodeMeta(): t.nodeDeleted} {
		inf, err := t.informers.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("get informer: %w", err)
		}
		reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: handler})
		if err != nil {
			return fmt.Errorf("add deletion handler: %w", err)
		}
		defer func() { _ = inf.RemoveEventHandler(reg) }()
	}
	close(t.ready)

	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		q.ShutDown()
	}()
	for t.processNext(ctx, q) {
	}
	<-done
	return nil
}

// Ready is closed once Start watches pod and Node deletions.
func (t *Triggers) Ready() <-chan struct{} { return t.ready }

func (t *Triggers) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[target]) bool {
	item, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(item)
	var err error
	switch item.kind {
	case targetNode:
		err = t.j.CheckNode(ctx, item.name)
	case targetMountpointPod:
		err = t.j.CheckMountpointPod(ctx, item.name)
	}
	if err != nil && ctx.Err() == nil {
		t.j.log.Error(err, "Targeted check failed; retrying with backoff")
		q.AddRateLimited(item)
		return true
	}
	q.Forget(item)
	return true
}

// enqueue schedules a check after each of the delays; false when not started yet.
func (t *Triggers) enqueue(item target, delays ...time.Duration) bool {
	t.mu.Lock()
	q := t.queue
	t.mu.Unlock()
	if q == nil {
		return false
	}
	for _, d := range delays {
		q.AddAfter(item, d)
	}
	return true
}

// podDeleted checks the nodes of the attachments that record the deleted pod as a workload,
// and again once its entry is old enough to be removed.
func (t *Triggers) podDeleted(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	var list s3csiv2.MountpointS3PodAttachmentList
	if err := t.j.cache.List(context.Background(), &list, client.MatchingFields{indexWorkloadUID: string(o.GetUID())}); err != nil {
		t.j.log.Error(err, "Looking up the attachments of a deleted pod failed; the sweep will find them", "pod", o.GetName())
		return
	}
	now := t.j.cfg.Now()
	for i := range list.Items {
		s3pa := &list.Items[i]
		delays := []time.Duration{t.delay}
		for _, ws := range s3pa.Spec.MountpointS3PodAttachments {
			for _, w := range ws {
				if w.WorkloadPodUID == string(o.GetUID()) && !t.j.stale(w.AttachmentTime.Time) {
					delays = append(delays, w.AttachmentTime.Add(t.j.cfg.StaleAfter).Sub(now)+t.delay)
				}
			}
		}
		t.enqueue(target{targetNode, s3pa.Spec.NodeName}, delays...)
	}
}

// nodeDeleted checks a deleted Node at once (starting its quarantine) and when it ends.
func (t *Triggers) nodeDeleted(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if o, ok := obj.(client.Object); ok {
		t.enqueue(target{targetNode, o.GetName()}, 0, t.j.cfg.NodeGoneGrace+t.delay)
	}
}

// EventSubjects are the bus subjects the janitor listens to, for every node.
func EventSubjects() []string {
	return events.NodeSubjects("", events.TypeVolumeUnpublished, events.TypeMountFailed, events.TypeMountpointNeedsUnmount)
}

// HandleEvent turns an event into targeted checks. It only schedules them, so it acknowledges
// at once; a check lost to a crash is made by the next sweep. Before Start it returns an error,
// so the event is redelivered rather than lost.
func (t *Triggers) HandleEvent(_ context.Context, d *events.Decoded) error {
	node := d.Node()
	var ok bool
	switch p := d.Payload.(type) {
	case *eventspb.VolumeUnpublished:
		// The workload is ending: its pod is deleted soon, and its entry may be young.
		ok = t.enqueue(target{targetNode, node}, t.delay, t.j.cfg.StaleAfter+t.delay)
	case *eventspb.MountFailed:
		ok = t.enqueue(target{targetNode, node}, t.delay)
		if ok && p.GetMountpointPodName() != "" {
			t.enqueue(target{targetMountpointPod, p.GetMountpointPodName()}, t.delay)
		}
	case *eventspb.MountpointNeedsUnmount:
		ok = t.enqueue(target{targetMountpointPod, p.GetMountpointPodName()}, t.delay, t.j.cfg.UnmountGrace+t.delay)
	default:
		return nil
	}
	if !ok {
		return fmt.Errorf("handle %s event: targeted checks not started yet", d.Type)
	}
	return nil
}
