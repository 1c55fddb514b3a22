package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/keymutex"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/mppod/mppodcheck"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/metrics"
)

// errRetry asks for the reconcile to run again shortly, without counting an error: a conflict
// with another writer or an object that went away underneath.
var errRetry = errors.New("retry")

// retryAfter is how soon a reconcile that hit errRetry runs again.
const retryAfter = 100 * time.Millisecond

// state is what the three controllers share.
type state struct {
	cfg Config
	// client reads from the cache and writes to the API server.
	client client.Client
	// live reads from the API server, for the rare reads the cache cannot answer.
	live     client.Reader
	pub      Publisher
	m        *metrics.Metrics
	recorder record.EventRecorder
	s3pas    *recentWrites[*s3csiv2.MountpointS3PodAttachment]
	mpPods   *recentWrites[*corev1.Pod]
	locks    *keymutex.Mutex // one read-decide-write per sharing key at a time
}

// attachment returns the S3PA named name as this process last knows it, nil when it is gone.
func (s *state) attachment(ctx context.Context, name string) (*s3csiv2.MountpointS3PodAttachment, error) {
	if a, deleted, ok := s.s3pas.get("", name); ok {
		if deleted {
			return nil, nil
		}
		return a, nil
	}
	a := &s3csiv2.MountpointS3PodAttachment{}
	if err := s.client.Get(ctx, client.ObjectKey{Name: name}, a); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get attachment %s: %w", name, err)
	}
	return a, nil
}

// mountpointPod returns the Mountpoint Pod named name as this process last knows it, nil when
// it does not exist.
func (s *state) mountpointPod(ctx context.Context, name string) (*corev1.Pod, error) {
	if p, deleted, ok := s.mpPods.get(s.cfg.MountpointNamespace, name); ok {
		if deleted {
			return nil, nil
		}
		return p, nil
	}
	p := &corev1.Pod{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: s.cfg.MountpointNamespace, Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get Mountpoint Pod %s: %w", name, err)
	}
	return p, nil
}

// mountpointPodAccepts reports whether the Mountpoint Pod name may take a new workload, judged
// on both the cached copy and this process's last write: the cache alone misses a pod created
// or annotated a moment ago, the last write alone misses what others changed since (a failure,
// a deletion).
func (s *state) mountpointPodAccepts(ctx context.Context, name string) (bool, error) {
	recent, deleted, inRecent := s.mpPods.get(s.cfg.MountpointNamespace, name)
	if deleted {
		return false, nil
	}
	cached := &corev1.Pod{}
	err := s.client.Get(ctx, client.ObjectKey{Namespace: s.cfg.MountpointNamespace, Name: name}, cached)
	switch {
	case apierrors.IsNotFound(err):
		if !inRecent || !s.acceptsWorkloads(recent) {
			return false, nil
		}
		// Written by this process but not cached: created a moment ago, or deleted since (a
		// drain evicted it and it finished). Only the API server can tell; a workload
		// recorded on a pod that is gone would wait for it for ever.
		live, err := s.liveMountpointPod(ctx, name)
		if err != nil || live == nil {
			return false, err
		}
		return s.acceptsWorkloads(live), nil
	case err != nil:
		return false, fmt.Errorf("get Mountpoint Pod %s: %w", name, err)
	}
	return s.acceptsWorkloads(cached) && (!inRecent || s.acceptsWorkloads(recent)), nil
}

// liveMountpointPod reads the Mountpoint Pod name from the API server; nil, recorded as
// deleted, when it does not exist. The caller holds the sharing-key lock of an attachment
// naming it, so no one creates it meanwhile.
func (s *state) liveMountpointPod(ctx context.Context, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := s.live.Get(ctx, client.ObjectKey{Namespace: s.cfg.MountpointNamespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			s.mpPods.tombstone(s.cfg.MountpointNamespace, name)
			return nil, nil
		}
		return nil, fmt.Errorf("get Mountpoint Pod %s: %w", name, err)
	}
	return pod, nil
}

// refreshAttachment re-reads the S3PA name from the API server into the recent writes, after a
// conflict showed that this process's copy is stale.
func (s *state) refreshAttachment(ctx context.Context, name string) error {
	live := &s3csiv2.MountpointS3PodAttachment{}
	if err := s.live.Get(ctx, client.ObjectKey{Name: name}, live); err != nil {
		if apierrors.IsNotFound(err) {
			s.s3pas.tombstone("", name)
			return nil
		}
		return fmt.Errorf("re-read attachment %s: %w", name, err)
	}
	s.s3pas.put(live)
	return nil
}

// acceptsWorkloads reports whether a Mountpoint Pod may take a new workload: it exists, is of
// this driver version and runs an image of the repository this version gives Mountpoint Pods
// (the node-agent hands no mount to a Mountpoint Pod of another: mppodcheck), is not marked
// needs-unmount, not terminating and not finished.
func (s *state) acceptsWorkloads(pod *corev1.Pod) bool {
	return pod != nil &&
		pod.Labels[s3csiv2.LabelDriverVersion] == s.cfg.DriverVersion &&
		len(pod.Spec.Containers) == 1 &&
		mppodcheck.Repository(pod.Spec.Containers[0].Image) == mppodcheck.Repository(s.cfg.Mountpoint.Image) &&
		pod.Annotations[mppod.AnnotationNeedsUnmount] == "" &&
		pod.DeletionTimestamp == nil &&
		!podEnded(pod)
}

// podByUID returns the cached pod with this UID, nil when none is cached.
func (s *state) podByUID(ctx context.Context, uid string) (*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := s.client.List(ctx, list, client.MatchingFields{indexPodUID: uid}); err != nil {
		return nil, fmt.Errorf("look up pod %s: %w", uid, err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	return &list.Items[0], nil
}

// activeWorkloads returns the recorded workloads whose pod still exists and has not ended,
// with their pods.
func (s *state) activeWorkloads(ctx context.Context, ws []s3csiv2.WorkloadAttachment) ([]s3csiv2.WorkloadAttachment, []*corev1.Pod, error) {
	var keep []s3csiv2.WorkloadAttachment
	var pods []*corev1.Pod
	for _, w := range ws {
		pod, err := s.podByUID(ctx, w.WorkloadPodUID)
		if err != nil {
			return nil, nil, err
		}
		if pod != nil && !podEnded(pod) {
			keep = append(keep, w)
			pods = append(pods, pod)
		}
	}
	return keep, pods, nil
}

// createMountpointPod creates pod, or reuses the Mountpoint Pod of that name when it exists and
// accepts workloads. created says whether this call created it.
func (s *state) createMountpointPod(ctx context.Context, pod *corev1.Pod) (got *corev1.Pod, created bool, err error) {
	if err := s.ownByNode(ctx, pod); err != nil {
		return nil, false, err
	}
	err = s.client.Create(ctx, pod)
	if err == nil {
		s.mpPods.put(pod)
		s.m.MountpointPodsCreatedTotal.Inc()
		return pod, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("create Mountpoint Pod %s: %w", pod.Name, err)
	}
	existing := &corev1.Pod{}
	if err := s.live.Get(ctx, client.ObjectKeyFromObject(pod), existing); err != nil {
		return nil, false, fmt.Errorf("get existing Mountpoint Pod %s: %w", pod.Name, err)
	}
	if !isOurMountpointPod(existing, s.cfg.MountpointNamespace) || !s.acceptsWorkloads(existing) {
		return nil, false, fmt.Errorf("create Mountpoint Pod %s: a pod of that name exists and takes no new workload: %w",
			pod.Name, errRetry)
	}
	s.mpPods.put(existing)
	return existing, false, nil
}

// ownByNode makes the Node a Mountpoint Pod is bound to its controller owner, as kubelet does
// for the mirror pods of static pods.
//
// Problem: `kubectl drain` (and every tool built on its library) refuses to evict a pod that
// declares no controller unless forced, so a drain of a node serving S3 volumes stopped at the
// first Mountpoint Pod ("cannot delete Pods that declare no controller").
// Solution: the Node, read from the API server (its UID must be the live one, or the garbage
// collector would delete the pod at once), is the pod's controller; drain then evicts it through
// the Eviction API and it serves its workloads through its grace period, and the garbage
// collector removes it with its Node. A Node that does not exist (a pod bound to a node that
// is gone) leaves the pod without an owner: it never runs, and the janitor removes it.
// Invariant: an owner reference names the Node's current UID, never blocks the Node's deletion
// (no finalizer permission needed), and is the only controller reference of the pod.
func (s *state) ownByNode(ctx context.Context, pod *corev1.Pod) error {
	node := nodeOf(pod)
	if node == "" {
		return nil
	}
	n := &metav1.PartialObjectMetadata{}
	n.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := s.live.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("get Node %s of Mountpoint Pod %s: %w", node, pod.Name, err)
	}
	pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID, Controller: ptr.To(true),
	}}
	return nil
}

// deleteMountpointPod deletes the Mountpoint Pod if it is still the object given (UID
// precondition). A pod already gone is not an error.
func (s *state) deleteMountpointPod(ctx context.Context, pod *corev1.Pod) error {
	err := s.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	switch {
	case err == nil:
		s.m.MountpointPodsDeletedTotal.Inc()
	case apierrors.IsConflict(err):
		return nil // another pod of that name: not ours to delete
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("delete Mountpoint Pod %s: %w", pod.Name, err)
	}
	s.mpPods.tombstone(pod.Namespace, pod.Name)
	return nil
}
