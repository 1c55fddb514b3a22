package reconciler

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
)

// workloadReconciler records each s3csi volume of a scheduled workload pod in the S3PA of its
// sharing key, creating the S3PA and a Mountpoint Pod when needed.
type workloadReconciler struct{ *state }

// isWorkloadCandidate is the cheap filter of pod events: a scheduled pod outside the
// Mountpoint namespace that mounts at least one claim.
func (s *state) isWorkloadCandidate(pod *corev1.Pod) bool {
	return pod.Namespace != s.cfg.MountpointNamespace && pod.Spec.NodeName != "" && hasClaims(pod)
}

func (r *workloadReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, req.NamespacedName, pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// An ended or terminating workload gets nothing new; the attachment controller removes it.
	if !r.isWorkloadCandidate(pod) || podEnded(pod) || pod.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	vols, unbound, bad := resolveVolumes(ctx, r.client, pod)
	for _, err := range bad {
		r.recorder.Eventf(pod, corev1.EventTypeWarning, "InvalidVolume", "Cannot mount an s3csi volume: %v", err)
	}
	if len(vols) > 0 {
		r.publishScheduled(ctx, pod, vols)
	}
	var errs []error
	for _, v := range vols {
		if err := r.assign(ctx, pod, v); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	if unbound {
		return reconcile.Result{RequeueAfter: unboundRetry}, nil
	}
	return reconcile.Result{}, nil
}

// assigned accounts for a new assignment and announces it.
func (r *workloadReconciler) assigned(ctx context.Context, pod *corev1.Pod, v workloadVolume,
	a *s3csiv2.MountpointS3PodAttachment, mpName string,
) {
	r.m.WorkloadsAssignedTotal.Inc()
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			r.m.ScheduledToAssigned.Observe(time.Since(c.LastTransitionTime.Time).Seconds())
		}
	}
	ctrllog.FromContext(ctx).V(1).Info("Assigned workload", "pod", client.ObjectKeyFromObject(pod),
		"volume", v.pv.Name, "attachment", a.Name, "mountpointPod", mpName)
	r.publishAssigned(ctx, pod, v, a, mpName)
}

// publishScheduled announces that a workload with s3csi volumes is on its node. The fact is
// the binding, which the scheduler already wrote; the id makes repeats of it one event.
func (r *workloadReconciler) publishScheduled(ctx context.Context, pod *corev1.Pod, vols []workloadVolume) {
	payload := &eventspb.WorkloadScheduled{
		Node: pod.Spec.NodeName, PodNamespace: pod.Namespace, PodName: pod.Name, PodUid: string(pod.UID),
	}
	for _, v := range vols {
		payload.Volumes = append(payload.Volumes, &eventspb.VolumeRef{PvName: v.pv.Name, VolumeId: v.key.VolumeID})
	}
	r.publish(ctx, events.DeterministicID(events.TypeWorkloadScheduled, string(pod.UID), pod.Spec.NodeName), payload)
}

// publishAssigned announces that the workload is recorded in a. The id names the fact (this
// workload in this S3PA on this Mountpoint Pod), so a republish after a restart is one event.
func (r *workloadReconciler) publishAssigned(ctx context.Context, pod *corev1.Pod, v workloadVolume,
	a *s3csiv2.MountpointS3PodAttachment, mpName string,
) {
	payload := &eventspb.AttachmentAssigned{
		Node: pod.Spec.NodeName, PvName: v.pv.Name, VolumeId: v.key.VolumeID, WorkloadPodUid: string(pod.UID),
		WorkloadNamespace: pod.Namespace, WorkloadName: pod.Name, AttachmentName: a.Name,
		MountpointPodName: mpName, ResourceVersion: a.ResourceVersion,
	}
	r.publish(ctx, events.DeterministicID(events.TypeAttachmentAssigned, string(a.UID), string(pod.UID), mpName), payload)
}

// publish builds the envelope and hands it to the publisher, which never blocks.
func (s *state) publish(ctx context.Context, id string, payload proto.Message) {
	e, err := events.New(eventSource, id, payload)
	if err != nil {
		ctrllog.FromContext(ctx).Error(err, "Cannot build event", "event", id)
		return
	}
	s.pub.Enqueue(e)
}
