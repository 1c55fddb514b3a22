package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/sharingkey"
)

// needsUnmountValue is the value of mppod.AnnotationNeedsUnmount.
const needsUnmountValue = "true"

// attachmentReconciler removes ended workloads from an S3PA, marks Mountpoint Pods left
// without workload needs-unmount, and deletes the S3PA once it records nothing.
type attachmentReconciler struct{ *state }

func (r *attachmentReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	a, err := r.attachment(ctx, req.Name)
	if err != nil || a == nil {
		return reconcile.Result{}, err
	}
	unlock := r.locks.Lock(sharingkey.FromSpec(&a.Spec).String())
	defer unlock()
	// Re-read under the lock: a workload reconcile may have written it meanwhile.
	if a, err = r.attachment(ctx, req.Name); err != nil || a == nil || a.DeletionTimestamp != nil {
		return reconcile.Result{}, err
	}

	desired := a.DeepCopy()
	changed := false
	for _, mpName := range slices.Sorted(maps.Keys(desired.Spec.MountpointS3PodAttachments)) {
		ws := desired.Spec.MountpointS3PodAttachments[mpName]
		active, workloads, err := r.activeWorkloads(ctx, ws)
		if err != nil {
			return reconcile.Result{}, err
		}
		if len(active) > 0 {
			if err := r.ensureMountpointPod(ctx, mpName, a, workloads); err != nil {
				return reconcile.Result{}, err
			}
		}
		if len(active) == len(ws) && len(ws) > 0 {
			continue
		}
		changed = true
		if len(active) > 0 {
			desired.Spec.MountpointS3PodAttachments[mpName] = active
			continue
		}
		// Mark before forgetting: if the S3PA update below fails, the next reconcile finds the
		// Mountpoint Pod empty again and marks it again (idempotent); the other order could
		// leave an unmarked Mountpoint Pod that no S3PA names.
		if err := r.markNeedsUnmount(ctx, mpName, a); err != nil {
			return reconcile.Result{}, err
		}
		delete(desired.Spec.MountpointS3PodAttachments, mpName)
	}
	if len(desired.Spec.MountpointS3PodAttachments) == 0 {
		return reconcile.Result{}, r.deleteAttachment(ctx, a)
	}
	if !changed {
		return reconcile.Result{}, nil
	}
	if err := r.client.Update(ctx, desired); err != nil {
		if apierrors.IsNotFound(err) {
			r.s3pas.tombstone("", a.Name)
			return reconcile.Result{}, nil
		}
		if apierrors.IsConflict(err) {
			if err := r.refreshAttachment(ctx, a.Name); err != nil {
				return reconcile.Result{}, err
			}
			return reconcile.Result{}, fmt.Errorf("remove workloads from attachment %s: %w", a.Name, errRetry)
		}
		return reconcile.Result{}, fmt.Errorf("remove workloads from attachment %s: %w", a.Name, err)
	}
	r.s3pas.put(desired)
	return reconcile.Result{}, nil
}

// ensureMountpointPod creates the Mountpoint Pod mpName again when a records live workloads on
// it and it does not exist.
//
// Problem: a workload recorded on a Mountpoint Pod that is gone (a drain deleted it as the
// workload was being recorded, an older driver, a hand edit) would wait for it for ever: the
// mountpoint controller replaces a pod only when its deletion finds workloads recorded on it.
// Solution: every reconcile of the S3PA checks that each Mountpoint Pod with live workloads
// exists (the cache, then the API server when the cache lacks it) and creates a missing one
// under its name, telling its workloads with the replacement's Warning Event.
// Invariant: the caller holds the sharing-key lock of a.
func (r *attachmentReconciler) ensureMountpointPod(ctx context.Context, mpName string,
	a *s3csiv2.MountpointS3PodAttachment, workloads []*corev1.Pod,
) error {
	err := r.client.Get(ctx, client.ObjectKey{Namespace: r.cfg.MountpointNamespace, Name: mpName}, &corev1.Pod{})
	switch {
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get Mountpoint Pod %s: %w", mpName, err)
	}
	live, err := r.liveMountpointPod(ctx, mpName)
	if err != nil || live != nil {
		return err
	}
	_, err = r.replaceLocked(ctx, mpName, nil, a, workloads, "missing")
	return err
}

// deleteAttachment deletes an S3PA that records no workload.
//
// Problem: between reading the S3PA as empty and deleting it, a workload may be added.
// Solution: delete with a resourceVersion precondition; a conflict means it changed, and the
// next reconcile looks again.
// Invariant: an S3PA that records a workload is never deleted by this controller.
func (r *attachmentReconciler) deleteAttachment(ctx context.Context, a *s3csiv2.MountpointS3PodAttachment) error {
	err := r.client.Delete(ctx, a, client.Preconditions{UID: &a.UID, ResourceVersion: &a.ResourceVersion})
	switch {
	case err == nil:
		r.m.AttachmentsDeletedTotal.Inc()
		ctrllog.FromContext(ctx).V(1).Info("Deleted empty attachment", "attachment", a.Name)
	case apierrors.IsConflict(err):
		if err := r.refreshAttachment(ctx, a.Name); err != nil {
			return err
		}
		return fmt.Errorf("delete empty attachment %s: %w", a.Name, errRetry)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("delete empty attachment %s: %w", a.Name, err)
	}
	r.s3pas.tombstone("", a.Name)
	return nil
}

// markNeedsUnmount annotates the Mountpoint Pod needs-unmount (a patch: cached pods are
// partial) and, once that write succeeded, publishes mountpoint.needs-unmount so the
// node-agent unmounts now rather than at its next sweep. A Mountpoint Pod that is gone needs
// nothing.
func (r *attachmentReconciler) markNeedsUnmount(ctx context.Context, mpName string, a *s3csiv2.MountpointS3PodAttachment) error {
	pod, err := r.mountpointPod(ctx, mpName)
	if err != nil || pod == nil {
		return err
	}
	if pod.Annotations[mppod.AnnotationNeedsUnmount] == "" {
		patched := pod.DeepCopy()
		if patched.Annotations == nil {
			patched.Annotations = map[string]string{}
		}
		patched.Annotations[mppod.AnnotationNeedsUnmount] = needsUnmountValue
		if err := r.client.Patch(ctx, patched, client.MergeFrom(pod)); err != nil {
			if apierrors.IsNotFound(err) {
				r.mpPods.tombstone(pod.Namespace, pod.Name)
				return nil
			}
			return fmt.Errorf("mark Mountpoint Pod %s needs-unmount: %w", mpName, err)
		}
		r.mpPods.put(patched)
		pod = patched
		ctrllog.FromContext(ctx).V(1).Info("Marked Mountpoint Pod needs-unmount", "mountpointPod", mpName, "attachment", a.Name)
	}
	r.publishNeedsUnmount(ctx, pod, a)
	return nil
}

func (s *state) publishNeedsUnmount(ctx context.Context, pod *corev1.Pod, a *s3csiv2.MountpointS3PodAttachment) {
	payload := &eventspb.MountpointNeedsUnmount{
		Node: a.Spec.NodeName, MountpointPodName: pod.Name, MountpointPodUid: string(pod.UID),
		PvName: a.Spec.PersistentVolumeName, Reason: "no workload left",
	}
	s.publish(ctx, events.DeterministicID(events.TypeMountpointNeedsUnmount, string(pod.UID)), payload)
}
