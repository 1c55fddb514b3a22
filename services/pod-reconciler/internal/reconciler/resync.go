package reconciler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// resyncer re-enqueues every workload, Mountpoint Pod and S3PA of the cache periodically.
//
// Problem: a reconcile that failed in a way that produced no new watch event (a dropped
// requeue, a bug in an event filter) would leave its object unreconciled until restart.
// Solution: a full pass over the cache that ignores events, on its own timer.
// Invariant: every object is reconciled at least once per period while this replica leads.
// It is a manager runnable that needs leader election, like the controllers.
type resyncer struct {
	period      time.Duration
	reader      client.Reader
	st          *state
	workloads   chan event.GenericEvent
	mountpoints chan event.GenericEvent
	attachments chan event.GenericEvent
}

func newResyncer(period time.Duration, reader client.Reader, st *state) *resyncer {
	return &resyncer{
		period: period, reader: reader, st: st,
		workloads:   make(chan event.GenericEvent),
		mountpoints: make(chan event.GenericEvent),
		attachments: make(chan event.GenericEvent),
	}
}

// Start runs a pass every period until ctx is done.
func (r *resyncer) Start(ctx context.Context) error {
	logger := ctrllog.FromContext(ctx).WithName("resync")
	t := time.NewTicker(r.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := r.pass(ctx); err != nil && ctx.Err() == nil {
				logger.Error(err, "Resync pass failed; next one in a period", "period", r.period)
			}
		}
	}
}

func (r *resyncer) pass(ctx context.Context) error {
	pods := &corev1.PodList{}
	if err := r.reader.List(ctx, pods); err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		switch {
		case isOurMountpointPod(pod, r.st.cfg.MountpointNamespace):
			r.send(ctx, r.mountpoints, pod)
		case r.st.isWorkloadCandidate(pod):
			r.send(ctx, r.workloads, pod)
		}
	}
	s3pas := &s3csiv2.MountpointS3PodAttachmentList{}
	if err := r.reader.List(ctx, s3pas); err != nil {
		return fmt.Errorf("list attachments: %w", err)
	}
	for i := range s3pas.Items {
		r.send(ctx, r.attachments, &s3pas.Items[i])
	}
	return nil
}

func (r *resyncer) send(ctx context.Context, ch chan<- event.GenericEvent, obj client.Object) {
	select {
	case ch <- event.GenericEvent{Object: obj}:
	case <-ctx.Done():
	}
}
