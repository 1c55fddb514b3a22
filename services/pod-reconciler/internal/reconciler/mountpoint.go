package reconciler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/sharingkey"
)

// mountpointReconciler deletes Mountpoint Pods that finished and replaces the ones that failed
// (or were evicted) while workloads still need them.
type mountpointReconciler struct{ *state }

func (r *mountpointReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, req.NamespacedName, pod); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("get Mountpoint Pod %s: %w", req.Name, err)
		}
		// Not cached: created a moment ago, or gone (a drain's eviction deletes it). Only the
		// API server can tell; replace it if it is gone and workloads still need it.
		if err := r.live.Get(ctx, req.NamespacedName, pod); err == nil {
			return reconcile.Result{}, nil
		} else if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("get Mountpoint Pod %s: %w", req.Name, err)
		}
		return r.replaceIfNeeded(ctx, req.Name, nil, "deleted")
	}
	if !isOurMountpointPod(pod, r.cfg.MountpointNamespace) || pod.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	if why, ok := unschedulable(pod); ok {
		if pod.Annotations[mppod.AnnotationNeedsUnmount] != "" {
			// Never scheduled, so it never ran nor mounted anything, and nothing will make it
			// exit: with no workload left it is deleted, not left Pending for ever.
			ctrllog.FromContext(ctx).Info("Deleting a Mountpoint Pod that was never scheduled and has no workload left",
				"mountpointPod", pod.Name)
			return reconcile.Result{}, r.deleteMountpointPod(ctx, pod)
		}
		reported, err := r.reportUnschedulable(ctx, pod, why)
		if err != nil || reported {
			return reconcile.Result{}, err
		}
		// Its attachment is written after it, and the scheduler may not update it again for
		// minutes: look again shortly rather than wait for that.
		return reconcile.Result{RequeueAfter: unschedulableRecheck}, nil
	}
	if !podEnded(pod) {
		return reconcile.Result{}, nil
	}
	cause := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		cause = pod.Status.Reason
	}
	if pod.Status.Message != "" {
		cause += ": " + pod.Status.Message
	}
	res, replaced, err := r.replaceIfNeededResult(ctx, pod.Name, pod, cause)
	if err != nil || replaced {
		return res, err
	}
	// Finished (the normal end after needs-unmount) or failed with nobody to serve.
	if err := r.deleteMountpointPod(ctx, pod); err != nil {
		return reconcile.Result{}, err
	}
	ctrllog.FromContext(ctx).V(1).Info("Deleted finished Mountpoint Pod", "mountpointPod", pod.Name, "phase", pod.Status.Phase)
	return reconcile.Result{}, nil
}

func (r *mountpointReconciler) replaceIfNeeded(ctx context.Context, name string, old *corev1.Pod, cause string) (reconcile.Result, error) {
	res, _, err := r.replaceIfNeededResult(ctx, name, old, cause)
	return res, err
}

// replaceIfNeededResult replaces the Mountpoint Pod name (old, or nil when it is gone) when an
// S3PA still records active workloads on it; replaced says whether it did (or will retry).
func (r *mountpointReconciler) replaceIfNeededResult(ctx context.Context, name string, old *corev1.Pod, cause string,
) (res reconcile.Result, replaced bool, err error) {
	list := &s3csiv2.MountpointS3PodAttachmentList{}
	if err := r.client.List(ctx, list, client.MatchingFields{indexMountpointPods: name}); err != nil {
		return reconcile.Result{}, false, fmt.Errorf("list attachments of Mountpoint Pod %s: %w", name, err)
	}
	for i := range list.Items {
		a := &list.Items[i]
		_, workloads, err := r.activeWorkloads(ctx, a.Spec.MountpointS3PodAttachments[name])
		if err != nil {
			return reconcile.Result{}, false, err
		}
		if len(workloads) > 0 {
			res, err := r.replace(ctx, name, old, a, workloads, cause)
			return res, true, err
		}
	}
	return reconcile.Result{}, false, nil
}

// replace deletes a finished Mountpoint Pod that workloads still need (old; nil when it is
// already gone) and creates a new one of the same name and shape, so the S3PA stays valid, and
// tells each workload why with a Warning Event. A finished pod is deleted at once by the API
// server (no kubelet grace period), so the name is free again right away; when it is not yet,
// the replacement is retried.
func (r *mountpointReconciler) replace(ctx context.Context, name string, old *corev1.Pod, a *s3csiv2.MountpointS3PodAttachment,
	workloads []*corev1.Pod, cause string,
) (reconcile.Result, error) {
	unlock := r.locks.Lock(sharingkey.FromSpec(&a.Spec).String())
	defer unlock()
	return r.replaceLocked(ctx, name, old, a, workloads, cause)
}

// replaceLocked is replace for a caller that holds the sharing-key lock of a.
func (s *state) replaceLocked(ctx context.Context, name string, old *corev1.Pod, a *s3csiv2.MountpointS3PodAttachment,
	workloads []*corev1.Pod, cause string,
) (reconcile.Result, error) {
	pv := &corev1.PersistentVolume{}
	if err := s.client.Get(ctx, client.ObjectKey{Name: a.Spec.PersistentVolumeName}, pv); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("get PersistentVolume %s: %w", a.Spec.PersistentVolumeName, err)
		}
		pv.Name = a.Spec.PersistentVolumeName
		pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{VolumeHandle: a.Spec.VolumeID}
	}
	fresh, err := buildMountpointPod(s.cfg, name, a.Spec.NodeName, pv)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := s.ownByNode(ctx, fresh); err != nil {
		return reconcile.Result{}, err
	}
	if old != nil {
		if err := s.deleteMountpointPod(ctx, old); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := s.client.Create(ctx, fresh); err != nil {
		if apierrors.IsAlreadyExists(err) {
			if old == nil {
				return reconcile.Result{}, nil // someone (an earlier reconcile) replaced it already
			}
			return reconcile.Result{RequeueAfter: replaceRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("create replacement Mountpoint Pod %s: %w", fresh.Name, err)
	}
	s.mpPods.put(fresh)
	s.m.MountpointPodsCreatedTotal.Inc()
	s.m.MountpointPodsReplacedTotal.Inc()
	for _, w := range workloads {
		s.recorder.Eventf(w, corev1.EventTypeWarning, "MountpointPodReplaced",
			"Mountpoint Pod %s/%s serving volume %s ended (%s) and was replaced; the node-agent moves the mount to "+
				"the new pod (Event MountpointHandedOver or MountpointReplaced); if the volume reports "+
				"\"transport endpoint is not connected\", restart this pod", fresh.Namespace, name,
			a.Spec.PersistentVolumeName, cause)
	}
	ctrllog.FromContext(ctx).Info("Replaced Mountpoint Pod", "mountpointPod", name, "cause", cause,
		"workloads", len(workloads), "volume", a.Spec.PersistentVolumeName, "node", a.Spec.NodeName)
	return reconcile.Result{}, nil
}

// unschedulable returns the scheduler's message when it could not place pod.
func unschedulable(pod *corev1.Pod) (string, bool) {
	if pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending {
		return "", false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}

// reportUnschedulable tells each workload waiting on a Mountpoint Pod the scheduler cannot
// place why, with a Warning Event.
//
// Problem: the node-agent waits for the Mountpoint Pod through a watch of its own node's pods,
// which an unplaced pod never enters, so the workload would sit in ContainerCreating until
// kubelet's mount times out with a message that names no cause (S15).
// Solution: the pod-reconciler, which sees the pod before it has a node, writes the scheduler's
// reason and the remedy on every workload of its attachments; the event recorder folds
// repeats into a count.
// Invariant: nothing is changed; the mount proceeds by itself once the pod is scheduled.
//
// reported says whether a workload was told; the caller looks again later when none was (the
// attachment naming the pod may not be in the cache yet).
func (r *mountpointReconciler) reportUnschedulable(ctx context.Context, pod *corev1.Pod, why string) (reported bool, err error) {
	list := &s3csiv2.MountpointS3PodAttachmentList{}
	if err := r.client.List(ctx, list, client.MatchingFields{indexMountpointPods: pod.Name}); err != nil {
		return false, fmt.Errorf("list attachments of Mountpoint Pod %s: %w", pod.Name, err)
	}
	for i := range list.Items {
		a := &list.Items[i]
		_, workloads, err := r.activeWorkloads(ctx, a.Spec.MountpointS3PodAttachments[pod.Name])
		if err != nil {
			return false, err
		}
		for _, w := range workloads {
			r.recorder.Eventf(w, corev1.EventTypeWarning, "MountpointPodUnschedulable",
				"Mountpoint Pod %s/%s for volume %s cannot be scheduled on node %s: %s; the volume mounts once it is: free room on the node "+
					"or lower the Mountpoint Pod's requests (chart mountpointPod.resources, or the volume's mountpointContainerResourcesRequests* attributes); see kubectl describe pod -n %s %s",
				pod.Namespace, pod.Name, a.Spec.PersistentVolumeName, a.Spec.NodeName, why, pod.Namespace, pod.Name)
		}
		if len(workloads) > 0 {
			reported = true
			ctrllog.FromContext(ctx).Info("Mountpoint Pod cannot be scheduled", "mountpointPod", pod.Name,
				"node", a.Spec.NodeName, "reason", why, "workloads", len(workloads))
		}
	}
	return reported, nil
}

// unschedulableRecheck is how soon an unschedulable Mountpoint Pod whose workloads could not be
// found yet is looked at again.
const unschedulableRecheck = 2 * time.Second
