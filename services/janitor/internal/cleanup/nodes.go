package cleanup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
)

// nodeGone reports whether node has been absent from the API server for NodeGoneGrace.
//
// Problem: a Node object can be deleted while its kubelet still runs; the kubelet registers it
// again within seconds, and its workloads keep using their mounts.
// Solution: like the pod garbage collector, quarantine: remember when the API server first said
// the Node was gone, and call it gone only when it still is NodeGoneGrace later.
// Invariant: a Node seen present (in the cache or the API server) restarts the quarantine; a
// restart of the janitor restarts it too, which only delays the removal.
func (j *Janitor) nodeGone(ctx context.Context, node string) (bool, error) {
	cached, err := j.nodeCached(ctx, node)
	if err != nil {
		return false, err
	}
	if !cached {
		err = j.api.Get(ctx, client.ObjectKey{Name: node}, newNodeMeta())
		if err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("get node: %w", err)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if cached || err == nil {
		delete(j.missingSince, node)
		return false, nil
	}
	since, ok := j.missingSince[node]
	if !ok {
		since = j.cfg.Now()
		j.missingSince[node] = since
		j.log.Info("Node is gone; its attachments will be removed unless it returns", "node", node,
			"after", j.cfg.NodeGoneGrace)
	}
	return !j.cfg.Now().Before(since.Add(j.cfg.NodeGoneGrace)), nil
}

// nodeQuarantined reports whether node is known gone but still inside its grace.
func (j *Janitor) nodeQuarantined(node string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.missingSince[node]
	return ok
}

// removeNode deletes every attachment of a gone node with the Mountpoint Pods it references,
// then the node's Mountpoint Pods no attachment references. Nothing on the node can use them:
// its workloads are gone with it (the pod garbage collector deletes them).
func (j *Janitor) removeNode(ctx context.Context, node string) error {
	var list s3csiv2.MountpointS3PodAttachmentList
	if err := j.api.List(ctx, &list, client.MatchingFields{s3csiv2.FieldNodeName: node}); err != nil {
		return fmt.Errorf("list attachments of gone node: %w", err)
	}
	var errs []error
	for i := range list.Items {
		s3pa := &list.Items[i]
		var podErrs []error
		for _, mp := range slices.Sorted(maps.Keys(s3pa.Spec.MountpointS3PodAttachments)) {
			if err := j.deleteMountpointPodByName(ctx, mp, node, ReasonNodeGone); err != nil {
				podErrs = append(podErrs, err)
			}
		}
		if len(podErrs) > 0 { // keep the record while a Mountpoint Pod it names remains
			errs = append(errs, podErrs...)
			continue
		}
		if err := j.deleteAttachment(ctx, s3pa, ReasonNodeGone); err != nil {
			errs = append(errs, err)
			continue
		}
		j.recordRemoved(KindAttachment, ReasonNodeGone, node, s3pa.Name, "",
			events.DeterministicID(events.TypeAttachmentCleaned, string(s3pa.UID), ReasonNodeGone))
	}
	var pods corev1.PodList
	if err := j.api.List(ctx, &pods, client.InNamespace(j.cfg.MountpointNamespace),
		client.MatchingFields{fieldPodNodeName: node}); err != nil {
		errs = append(errs, fmt.Errorf("list Mountpoint Pods of gone node: %w", err))
	}
	for i := range pods.Items {
		if isMountpointPod(pods.Items[i].Labels) {
			errs = append(errs, j.deleteMountpointPod(ctx, &pods.Items[i], ReasonNodeGone))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	j.mu.Lock()
	delete(j.missingSince, node)
	j.mu.Unlock()
	return nil
}

// deleteMountpointPodByName re-reads a Mountpoint Pod and deletes it if it is the driver's and
// belongs to node. A pod that is already gone is fine.
func (j *Janitor) deleteMountpointPodByName(ctx context.Context, name, node, reason string) error {
	var pod corev1.Pod
	err := j.api.Get(ctx, client.ObjectKey{Namespace: j.cfg.MountpointNamespace, Name: name}, &pod)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get Mountpoint Pod %s: %w", name, err)
	}
	if !isMountpointPod(pod.Labels) {
		return nil
	}
	if n := mountpointPodNode(&pod); n != "" && n != node {
		return nil
	}
	return j.deleteMountpointPod(ctx, &pod, reason)
}

// deleteMountpointPod deletes pod if it still is the version that was read.
func (j *Janitor) deleteMountpointPod(ctx context.Context, pod *corev1.Pod, reason string) error {
	if pod.DeletionTimestamp != nil {
		return nil
	}
	node := mountpointPodNode(pod)
	log := j.log.WithValues("mountpointPod", pod.Name, "node", node, "reason", reason)
	if j.cfg.DryRun {
		log.Info("Dry run: would delete Mountpoint Pod")
		return nil
	}
	err := j.writer.Delete(ctx, pod, client.Preconditions{UID: ptr(pod.UID), ResourceVersion: ptr(pod.ResourceVersion)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete Mountpoint Pod %s: %w", pod.Name, err)
	}
	log.Info("Deleted Mountpoint Pod")
	j.recordRemoved(KindMountpointPod, reason, node, "", pod.Name,
		events.DeterministicID(events.TypeAttachmentCleaned, string(pod.UID), reason))
	return nil
}

// since parses a needs-unmount-since annotation; ok is false when absent or malformed.
func since(annotations map[string]string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, annotations[AnnotationNeedsUnmountSince])
	return t, err == nil
}
