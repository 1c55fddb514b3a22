package cleanup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
)

// CheckNode removes what leaked on node: workload entries of pods that no longer exist, the
// Mountpoint Pods they leave without workloads (asked to unmount), empty attachments, and, once
// the Node itself has been gone for NodeGoneGrace, all its attachments and Mountpoint Pods.
// It is idempotent; running it on a clean node only reads.
//
// Problem: a conflict means someone (usually the pod-reconciler) wrote the attachment after it
// was read; the pod list the decision was based on may then predate a new workload.
// Solution: on conflict the whole pass runs again, re-reading attachments first and pods second.
// Invariant: a workload entry is removed only if its pod was absent from a pod list read after
// the attachment version the write is conditioned on.
func (j *Janitor) CheckNode(ctx context.Context, node string) error {
	defer j.locks.Lock("node/" + node)()
	err := onConflict(ctx, func() error {
		gone, err := j.nodeGone(ctx, node)
		if err != nil {
			return err
		}
		if gone {
			return j.removeNode(ctx, node)
		}
		return j.cleanNodeAttachments(ctx, node)
	})
	if err != nil {
		j.metrics.Errors.WithLabelValues("node").Inc()
		return fmt.Errorf("check node %s: %w", node, err)
	}
	return nil
}

// cleanNodeAttachments is one pass of the workload and empty-attachment rules on node.
func (j *Janitor) cleanNodeAttachments(ctx context.Context, node string) error {
	var list s3csiv2.MountpointS3PodAttachmentList
	if err := j.api.List(ctx, &list, client.MatchingFields{s3csiv2.FieldNodeName: node}); err != nil {
		return fmt.Errorf("list attachments of node: %w", err)
	}
	if !slices.ContainsFunc(list.Items, j.mayHoldStaleEntries) {
		return nil
	}
	// Read after the attachments: every workload recorded in them was created before this list.
	pods := newPodMetaList()
	if err := j.api.List(ctx, pods, client.MatchingFields{fieldPodNodeName: node}); err != nil {
		return fmt.Errorf("list pods of node: %w", err)
	}
	live := sets.New[string]()
	for i := range pods.Items {
		live.Insert(string(pods.Items[i].UID))
	}
	var errs []error
	for i := range list.Items {
		if err := j.cleanAttachment(ctx, &list.Items[i], live); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mayHoldStaleEntries reports whether an attachment has an entry old enough to be removed if
// its pod is gone, or is old and empty; only then is the node's pod list worth reading.
func (j *Janitor) mayHoldStaleEntries(s3pa s3csiv2.MountpointS3PodAttachment) bool {
	if j.stale(s3pa.CreationTimestamp.Time) && emptyEntries(&s3pa) {
		return true
	}
	for _, ws := range s3pa.Spec.MountpointS3PodAttachments {
		for _, w := range ws {
			if j.stale(w.AttachmentTime.Time) {
				return true
			}
		}
	}
	return false
}

// emptyEntries reports whether an attachment has no entries or a Mountpoint Pod without workloads.
func emptyEntries(s3pa *s3csiv2.MountpointS3PodAttachment) bool {
	if len(s3pa.Spec.MountpointS3PodAttachments) == 0 {
		return true
	}
	for _, ws := range s3pa.Spec.MountpointS3PodAttachments {
		if len(ws) == 0 {
			return true
		}
	}
	return false
}

// pruned is what cleaning one attachment decided.
type pruned struct {
	removed map[string][]s3csiv2.WorkloadAttachment // Mountpoint Pod name -> workloads removed
	emptied []string                                // Mountpoint Pods left without workloads
	entries map[string][]s3csiv2.WorkloadAttachment // what remains
}

// prune computes the attachment's entries without the workloads that are gone and stale.
func (j *Janitor) prune(s3pa *s3csiv2.MountpointS3PodAttachment, live sets.Set[string]) pruned {
	p := pruned{removed: map[string][]s3csiv2.WorkloadAttachment{}, entries: map[string][]s3csiv2.WorkloadAttachment{}}
	oldObject := j.stale(s3pa.CreationTimestamp.Time)
	for mp, ws := range s3pa.Spec.MountpointS3PodAttachments {
		keep := make([]s3csiv2.WorkloadAttachment, 0, len(ws)) // never null in the written object
		for _, w := range ws {
			if live.Has(w.WorkloadPodUID) || !j.stale(w.AttachmentTime.Time) {
				keep = append(keep, w)
				continue
			}
			p.removed[mp] = append(p.removed[mp], w)
		}
		if len(keep) == 0 && (len(p.removed[mp]) > 0 || oldObject) {
			p.emptied = append(p.emptied, mp)
			continue
		}
		p.entries[mp] = keep
	}
	slices.Sort(p.emptied)
	return p
}

// cleanAttachment removes the gone workloads of one attachment (read from the API server, with
// its resourceVersion), deletes it when nothing remains, and asks the Mountpoint Pods left
// without workloads to unmount. The attachment write comes first: it is the precondition-guarded
// step that proves no workload was added meanwhile; an unmount request that a crash loses is
// made later by the orphan rule.
func (j *Janitor) cleanAttachment(ctx context.Context, s3pa *s3csiv2.MountpointS3PodAttachment, live sets.Set[string]) error {
	p := j.prune(s3pa, live)
	emptyAndOld := len(s3pa.Spec.MountpointS3PodAttachments) == 0 && j.stale(s3pa.CreationTimestamp.Time)
	if len(p.removed) == 0 && len(p.emptied) == 0 && !emptyAndOld {
		return nil
	}
	deleted := len(p.entries) == 0
	if deleted {
		if err := j.deleteAttachment(ctx, s3pa, ReasonEmptyAttachment); err != nil {
			return err
		}
	} else if err := j.updateAttachment(ctx, s3pa, p.entries); err != nil {
		return err
	}
	for _, mp := range slices.Sorted(maps.Keys(p.removed)) {
		for _, w := range p.removed[mp] {
			j.recordWorkloadRemoved(s3pa, mp, w.WorkloadPodUID)
		}
	}
	if deleted {
		j.recordRemoved(KindAttachment, ReasonEmptyAttachment, s3pa.Spec.NodeName, s3pa.Name, "",
			events.DeterministicID(events.TypeAttachmentCleaned, string(s3pa.UID), ReasonEmptyAttachment))
	}
	var errs []error
	for _, mp := range p.emptied {
		if err := j.requestUnmount(ctx, mp, s3pa.Spec.PersistentVolumeName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// updateAttachment writes entries into s3pa, conditioned on the resourceVersion it was read at.
func (j *Janitor) updateAttachment(ctx context.Context, s3pa *s3csiv2.MountpointS3PodAttachment,
	entries map[string][]s3csiv2.WorkloadAttachment) error {
	log := j.log.WithValues("attachment", s3pa.Name, "node", s3pa.Spec.NodeName, "volume", s3pa.Spec.PersistentVolumeName)
	if j.cfg.DryRun {
		log.Info("Dry run: would remove gone workloads from attachment", "remaining", len(entries))
		return nil
	}
	updated := s3pa.DeepCopy()
	updated.Spec.MountpointS3PodAttachments = entries
	if err := j.writer.Update(ctx, updated); err != nil {
		return fmt.Errorf("update attachment %s: %w", s3pa.Name, err)
	}
	log.Info("Removed gone workloads from attachment", "remaining", len(entries))
	*s3pa = *updated
	return nil
}

// deleteAttachment deletes s3pa if it still is the version (and object) that was read.
// NotFound means someone else removed it: done.
func (j *Janitor) deleteAttachment(ctx context.Context, s3pa *s3csiv2.MountpointS3PodAttachment, reason string) error {
	log := j.log.WithValues("attachment", s3pa.Name, "node", s3pa.Spec.NodeName,
		"volume", s3pa.Spec.PersistentVolumeName, "reason", reason)
	if j.cfg.DryRun {
		log.Info("Dry run: would delete attachment")
		return nil
	}
	err := j.writer.Delete(ctx, s3pa, client.Preconditions{UID: ptr(s3pa.UID), ResourceVersion: ptr(s3pa.ResourceVersion)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete attachment %s: %w", s3pa.Name, err)
	}
	log.Info("Deleted attachment")
	return nil
}

func (j *Janitor) recordWorkloadRemoved(s3pa *s3csiv2.MountpointS3PodAttachment, mp, uid string) {
	if j.cfg.DryRun {
		return
	}
	j.metrics.Removed.WithLabelValues(KindWorkload, ReasonWorkloadGone).Inc()
	j.notify.Notify(events.DeterministicID(events.TypeAttachmentCleaned, string(s3pa.UID), uid, ReasonWorkloadGone),
		&eventspb.AttachmentCleaned{
			Node: s3pa.Spec.NodeName, AttachmentName: s3pa.Name, WorkloadPodUid: uid,
			MountpointPodName: mp, Reason: ReasonWorkloadGone,
		})
}

// recordRemoved counts a removal and publishes its attachment.cleaned event.
func (j *Janitor) recordRemoved(kind, reason, node, attachment, mountpointPod, id string) {
	if j.cfg.DryRun {
		return
	}
	j.metrics.Removed.WithLabelValues(kind, reason).Inc()
	if node == "" {
		return // node-scoped event: without a node there is no subject to publish on
	}
	j.notify.Notify(id, &eventspb.AttachmentCleaned{
		Node: node, AttachmentName: attachment, MountpointPodName: mountpointPod, Reason: reason,
	})
}

func ptr[T any](v T) *T { return &v }
