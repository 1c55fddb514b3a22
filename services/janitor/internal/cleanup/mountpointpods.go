package cleanup

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mppod"
)

// CheckMountpointPod handles a Mountpoint Pod that may be orphaned: when no attachment
// references it and it is older than StaleAfter, it is asked to unmount (annotated and
// announced), then deleted once it has exited or UnmountGrace after the request.
//
// Problem: the pod-reconciler creates a Mountpoint Pod before the attachment that references
// it, so a young unreferenced Mountpoint Pod is normal; and an attachment can start to
// reference a Mountpoint Pod between our read and our write.
// Solution: only pods older than StaleAfter qualify; the references are re-read from the API
// server right before the write, and the write is conditioned on the pod's resourceVersion.
// Invariant: a Mountpoint Pod is annotated or deleted only if no attachment referenced it after
// the pod version the write is conditioned on was read; an annotated pod gets no new workload.
func (j *Janitor) CheckMountpointPod(ctx context.Context, name string) error {
	defer j.locks.Lock("mountpointpod/" + name)()
	if err := onConflict(ctx, func() error { return j.checkMountpointPodOnce(ctx, name) }); err != nil {
		j.metrics.Errors.WithLabelValues("mountpointpod").Inc()
		return fmt.Errorf("check Mountpoint Pod %s: %w", name, err)
	}
	return nil
}

func (j *Janitor) checkMountpointPodOnce(ctx context.Context, name string) error {
	var pod corev1.Pod
	err := j.api.Get(ctx, client.ObjectKey{Namespace: j.cfg.MountpointNamespace, Name: name}, &pod)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get Mountpoint Pod: %w", err)
	}
	if !isMountpointPod(pod.Labels) || pod.DeletionTimestamp != nil || !j.stale(pod.CreationTimestamp.Time) {
		return nil
	}
	referenced, err := j.referenced(ctx, name, mountpointPodNode(&pod))
	if err != nil || referenced {
		return err
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return j.deleteMountpointPod(ctx, &pod, ReasonMountpointPodFinished)
	}
	_, asked := pod.Annotations[mppod.AnnotationNeedsUnmount]
	askedAt, ok := since(pod.Annotations)
	if !asked || !ok {
		return j.annotateNeedsUnmount(ctx, &pod, "", ReasonOrphanMountpointPod)
	}
	if j.cfg.Now().Sub(askedAt) >= j.cfg.UnmountGrace {
		return j.deleteMountpointPod(ctx, &pod, ReasonUnmountGraceExpired)
	}
	return nil
}

// referenced reports whether an attachment (read from the API server) names the Mountpoint Pod.
// Attachments are listed for the pod's node when it is known, else all of them.
func (j *Janitor) referenced(ctx context.Context, name, node string) (bool, error) {
	var list s3csiv2.MountpointS3PodAttachmentList
	var opts []client.ListOption
	if node != "" {
		opts = append(opts, client.MatchingFields{s3csiv2.FieldNodeName: node})
	}
	if err := j.api.List(ctx, &list, opts...); err != nil {
		return false, fmt.Errorf("list attachments: %w", err)
	}
	for i := range list.Items {
		if _, ok := list.Items[i].Spec.MountpointS3PodAttachments[name]; ok {
			return true, nil
		}
	}
	return false, nil
}

// requestUnmount asks a Mountpoint Pod that an attachment write just left without workloads to
// unmount. A pod that is gone, terminating or not the driver's needs nothing.
func (j *Janitor) requestUnmount(ctx context.Context, name, pvName string) error {
	return onConflict(ctx, func() error {
		var pod corev1.Pod
		err := j.api.Get(ctx, client.ObjectKey{Namespace: j.cfg.MountpointNamespace, Name: name}, &pod)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get Mountpoint Pod %s: %w", name, err)
		}
		if !isMountpointPod(pod.Labels) || pod.DeletionTimestamp != nil {
			return nil
		}
		return j.annotateNeedsUnmount(ctx, &pod, pvName, ReasonWorkloadGone)
	})
}

// annotateNeedsUnmount sets the needs-unmount annotation (and the time the janitor first saw
// it) with an optimistic lock, then publishes mountpoint.needs-unmount when the janitor made
// the request. A pod already asked is left alone, apart from recording when.
func (j *Janitor) annotateNeedsUnmount(ctx context.Context, pod *corev1.Pod, pvName, reason string) error {
	_, asked := pod.Annotations[mppod.AnnotationNeedsUnmount]
	_, ok := since(pod.Annotations)
	if asked && ok {
		return nil
	}
	node := mountpointPodNode(pod)
	log := j.log.WithValues("mountpointPod", pod.Name, "node", node, "reason", reason)
	if j.cfg.DryRun {
		if !asked {
			log.Info("Dry run: would ask Mountpoint Pod to unmount")
		}
		return nil
	}
	patched := pod.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	if !asked {
		patched.Annotations[mppod.AnnotationNeedsUnmount] = "true"
	}
	patched.Annotations[AnnotationNeedsUnmountSince] = j.cfg.Now().UTC().Format(time.RFC3339)
	err := j.writer.Patch(ctx, patched, client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile: nothing left to unmount for
	}
	if err != nil {
		return fmt.Errorf("annotate Mountpoint Pod %s: %w", pod.Name, err)
	}
	if asked {
		return nil
	}
	log.Info("Asked Mountpoint Pod to unmount")
	j.metrics.UnmountRequests.Inc()
	if node != "" {
		j.notify.Notify(events.DeterministicID(events.TypeMountpointNeedsUnmount, string(pod.UID)),
			&eventspb.MountpointNeedsUnmount{
				Node: node, MountpointPodName: pod.Name, MountpointPodUid: string(pod.UID), PvName: pvName, Reason: reason,
			})
	}
	return nil
}
