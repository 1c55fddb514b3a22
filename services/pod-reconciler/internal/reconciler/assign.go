package reconciler

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/sharingkey"
)

// maxConflictRetries bounds the re-read-and-retry loop of one S3PA update.
const maxConflictRetries = 5

// assign records the workload in the S3PA of v's sharing key.
//
// Problem: workloads of one key arrive concurrently (50 replicas of one Deployment on a node)
// and the cache lags; naive reconciles create one S3PA each.
// Solution: the whole read-decide-write runs under the key's lock, and reads overlay this
// process's own recent writes on the cache (recentWrites), so the second workload sees the S3PA
// the first one created even before the cache does. Duplicates that exist anyway (another
// replica during a leader handover, an older driver) are repaired: the populated one is kept.
// Invariant: within this process one S3PA per key is ever created while the first is alive.
func (r *workloadReconciler) assign(ctx context.Context, pod *corev1.Pod, v workloadVolume) error {
	unlock := r.locks.Lock(v.key.String())
	defer unlock()

	// The key is fixed when the workload is first recorded: its volume is mounted with that
	// key's options, so a later change of the PV (new mount options) applies to new workloads
	// only, never moves this one.
	recorded, err := r.recordedIn(ctx, pod.UID, v.pv.Name)
	if err != nil {
		return err
	}
	candidates, err := r.attachmentsFor(ctx, v.key)
	if err != nil {
		return err
	}
	for _, a := range append(recorded, candidates...) {
		if mpName := findWorkload(a, pod.UID); mpName != "" {
			// Already recorded. While the workload waits to start, say so again: the event of
			// the first assignment may have been lost (the id makes it one event on the bus).
			if pod.Status.Phase == corev1.PodPending {
				r.publishAssigned(ctx, pod, v, a, mpName)
			}
			return nil
		}
	}
	switch len(candidates) {
	case 0:
		return r.createAttachment(ctx, pod, v)
	case 1:
		return r.addWorkload(ctx, pod, v, candidates[0])
	default:
		return r.addWorkload(ctx, pod, v, r.repairDuplicates(ctx, candidates))
	}
}

// attachmentsFor lists the live S3PAs of key: cache index lookup, exact key match, overlaid with
// this process's recent writes.
func (s *state) attachmentsFor(ctx context.Context, key sharingkey.Key) ([]*s3csiv2.MountpointS3PodAttachment, error) {
	list := &s3csiv2.MountpointS3PodAttachmentList{}
	if err := s.client.List(ctx, list, key.SelectableFields()); err != nil {
		return nil, fmt.Errorf("list attachments of %s: %w", key, err)
	}
	keep := func(a *s3csiv2.MountpointS3PodAttachment) bool {
		return a.DeletionTimestamp == nil && key.Matches(&a.Spec)
	}
	cached := make([]*s3csiv2.MountpointS3PodAttachment, 0, len(list.Items))
	for i := range list.Items {
		if keep(&list.Items[i]) {
			cached = append(cached, &list.Items[i])
		}
	}
	return s.s3pas.overlay(cached, keep), nil
}

// recordedIn lists the live S3PAs of PV pvName that record the workload uid.
func (s *state) recordedIn(ctx context.Context, uid types.UID, pvName string) ([]*s3csiv2.MountpointS3PodAttachment, error) {
	list := &s3csiv2.MountpointS3PodAttachmentList{}
	if err := s.client.List(ctx, list, client.MatchingFields{indexWorkloadUIDs: string(uid)}); err != nil {
		return nil, fmt.Errorf("list attachments of workload %s: %w", uid, err)
	}
	keep := func(a *s3csiv2.MountpointS3PodAttachment) bool {
		return a.Spec.PersistentVolumeName == pvName && findWorkload(a, uid) != ""
	}
	cached := make([]*s3csiv2.MountpointS3PodAttachment, 0, len(list.Items))
	for i := range list.Items {
		if keep(&list.Items[i]) {
			cached = append(cached, &list.Items[i])
		}
	}
	return s.s3pas.overlay(cached, keep), nil
}

// findWorkload returns the Mountpoint Pod under which a records uid, "" when it does not.
func findWorkload(a *s3csiv2.MountpointS3PodAttachment, uid types.UID) string {
	for mpName, ws := range a.Spec.MountpointS3PodAttachments {
		for _, w := range ws {
			if w.WorkloadPodUID == string(uid) {
				return mpName
			}
		}
	}
	return ""
}

// createAttachment creates the Mountpoint Pod first, then the S3PA naming it, so that an S3PA
// never points at a Mountpoint Pod that was never created; if the S3PA cannot be created, the
// Mountpoint Pod this call created is deleted again.
func (r *workloadReconciler) createAttachment(ctx context.Context, pod *corev1.Pod, v workloadVolume) error {
	mp, err := buildMountpointPod(r.cfg, mppod.Name(string(pod.UID), v.pv.Name), pod.Spec.NodeName, v.pv)
	if err != nil {
		return err
	}
	mp, created, err := r.createMountpointPod(ctx, mp)
	if err != nil {
		return err
	}
	a := &s3csiv2.MountpointS3PodAttachment{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "s3pa-",
			Labels:       map[string]string{s3csiv2.LabelDriverVersion: r.cfg.DriverVersion},
		},
		Spec: v.key.Spec(),
	}
	a.Spec.MountpointS3PodAttachments = map[string][]s3csiv2.WorkloadAttachment{
		mp.Name: {{WorkloadPodUID: string(pod.UID), AttachmentTime: metav1.Now()}},
	}
	if err := r.client.Create(ctx, a); err != nil {
		if created {
			if derr := r.deleteMountpointPod(ctx, mp); derr != nil {
				ctrllog.FromContext(ctx).Error(derr, "Cannot delete the Mountpoint Pod of a failed attachment", "mountpointPod", mp.Name)
			}
		}
		return fmt.Errorf("create attachment for %s: %w", v.key, err)
	}
	r.s3pas.put(a)
	r.m.AttachmentsCreatedTotal.Inc()
	r.assigned(ctx, pod, v, a, mp.Name)
	return nil
}

// addWorkload records the workload in a, on a Mountpoint Pod of a that accepts workloads or on
// a new one. A conflict re-reads a from the API server and tries again.
func (r *workloadReconciler) addWorkload(ctx context.Context, pod *corev1.Pod, v workloadVolume,
	a *s3csiv2.MountpointS3PodAttachment,
) error {
	for range maxConflictRetries {
		if mpName := findWorkload(a, pod.UID); mpName != "" {
			return nil
		}
		mpName, err := r.pickMountpointPod(ctx, a)
		if err != nil {
			return err
		}
		if mpName == "" {
			mp, err := buildMountpointPod(r.cfg, mppod.Name(string(pod.UID), v.pv.Name), pod.Spec.NodeName, v.pv)
			if err != nil {
				return err
			}
			if mp, _, err = r.createMountpointPod(ctx, mp); err != nil {
				return err
			}
			mpName = mp.Name
		}
		updated := a.DeepCopy()
		if updated.Spec.MountpointS3PodAttachments == nil {
			updated.Spec.MountpointS3PodAttachments = map[string][]s3csiv2.WorkloadAttachment{}
		}
		updated.Spec.MountpointS3PodAttachments[mpName] = append(updated.Spec.MountpointS3PodAttachments[mpName],
			s3csiv2.WorkloadAttachment{WorkloadPodUID: string(pod.UID), AttachmentTime: metav1.Now()})
		err = r.client.Update(ctx, updated)
		switch {
		case err == nil:
			r.s3pas.put(updated)
			r.assigned(ctx, pod, v, updated, mpName)
			return nil
		case apierrors.IsNotFound(err):
			r.s3pas.tombstone("", a.Name)
			return fmt.Errorf("add workload to attachment %s: deleted meanwhile: %w", a.Name, errRetry)
		case !apierrors.IsConflict(err):
			return fmt.Errorf("add workload to attachment %s: %w", a.Name, err)
		}
		live := &s3csiv2.MountpointS3PodAttachment{}
		if err := r.live.Get(ctx, client.ObjectKeyFromObject(a), live); err != nil {
			if apierrors.IsNotFound(err) {
				r.s3pas.tombstone("", a.Name)
				return fmt.Errorf("re-read attachment %s: deleted meanwhile: %w", a.Name, errRetry)
			}
			return fmt.Errorf("re-read attachment %s: %w", a.Name, err)
		}
		r.s3pas.put(live)
		a = live
	}
	return fmt.Errorf("add workload to attachment %s: still conflicting after %d attempts: %w", a.Name, maxConflictRetries, errRetry)
}

// pickMountpointPod returns a Mountpoint Pod of a that accepts a new workload, "" when none
// does. Names are tried in order, so concurrent workloads converge on the same one.
func (r *workloadReconciler) pickMountpointPod(ctx context.Context, a *s3csiv2.MountpointS3PodAttachment) (string, error) {
	names := make([]string, 0, len(a.Spec.MountpointS3PodAttachments))
	for name := range a.Spec.MountpointS3PodAttachments {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		ok, err := r.mountpointPodAccepts(ctx, name)
		if err != nil {
			return "", err
		}
		if ok {
			return name, nil
		}
	}
	return "", nil
}

// repairDuplicates keeps one S3PA of a key when several exist: the one with the most workloads
// (then the oldest). Empty duplicates are deleted (resourceVersion precondition, so one that
// just got a workload stays); populated ones keep serving their workloads and drain.
func (r *workloadReconciler) repairDuplicates(ctx context.Context, as []*s3csiv2.MountpointS3PodAttachment) *s3csiv2.MountpointS3PodAttachment {
	slices.SortFunc(as, func(x, y *s3csiv2.MountpointS3PodAttachment) int {
		return cmp.Or(
			cmp.Compare(countWorkloads(y), countWorkloads(x)),
			x.CreationTimestamp.Compare(y.CreationTimestamp.Time),
			cmp.Compare(x.Name, y.Name))
	})
	logger := ctrllog.FromContext(ctx)
	for _, dup := range as[1:] {
		if countWorkloads(dup) > 0 {
			continue
		}
		err := r.client.Delete(ctx, dup, client.Preconditions{UID: &dup.UID, ResourceVersion: &dup.ResourceVersion})
		switch {
		case err == nil:
			r.m.AttachmentsDeletedTotal.Inc()
			r.s3pas.tombstone("", dup.Name)
			logger.Info("Deleted duplicate attachment", "attachment", dup.Name, "kept", as[0].Name)
		case apierrors.IsNotFound(err):
			r.s3pas.tombstone("", dup.Name)
		default:
			logger.Info("Cannot delete duplicate attachment yet", "attachment", dup.Name, "reason", err.Error())
		}
	}
	return as[0]
}

func countWorkloads(a *s3csiv2.MountpointS3PodAttachment) int {
	n := 0
	for _, ws := range a.Spec.MountpointS3PodAttachments {
		n += len(ws)
	}
	return n
}
