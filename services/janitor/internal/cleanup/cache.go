package cleanup

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// Cache indexes the janitor registers.
const (
	// indexPodUID finds a pod (metadata) by UID: the attachment records workloads by UID only.
	indexPodUID = "metadata.uid"
	// indexWorkloadUID finds the attachments that record a workload UID.
	indexWorkloadUID = "spec.mountpointS3PodAttachments.workloadPodUID"
)

// fieldPodNodeName is the pod field the API server filters on to list one node's pods.
const fieldPodNodeName = "spec.nodeName"

// CacheOptions are the manager cache options the janitor needs.
//
// Problem: the janitor must know every pod UID in the cluster to tell a live workload from a
// gone one, and full pod objects of a large cluster cost hundreds of megabytes.
// Solution: pods and nodes are cached as metadata only (PartialObjectMetadata), and managed
// fields are stripped from every cached object.
// Invariant: only attachments are cached in full; anything else is read from the API server
// when a decision needs it.
func CacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
}

// Indexes registers the cache indexes the janitor's lookups use.
func Indexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := s3csiv2.IndexFields(ctx, indexer, s3csiv2.FieldNodeName); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, newPodMeta(), indexPodUID, func(o client.Object) []string {
		return []string{string(o.GetUID())}
	}); err != nil {
		return fmt.Errorf("index pods by UID: %w", err)
	}
	if err := indexer.IndexField(ctx, &s3csiv2.MountpointS3PodAttachment{}, indexWorkloadUID, workloadUIDs); err != nil {
		return fmt.Errorf("index attachments by workload UID: %w", err)
	}
	return nil
}

func workloadUIDs(o client.Object) []string {
	s3pa, ok := o.(*s3csiv2.MountpointS3PodAttachment)
	if !ok {
		return nil
	}
	var uids []string
	for _, ws := range s3pa.Spec.MountpointS3PodAttachments {
		for _, w := range ws {
			uids = append(uids, w.WorkloadPodUID)
		}
	}
	return uids
}

func newPodMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return m
}

func newPodMetaList() *metav1.PartialObjectMetadataList {
	m := &metav1.PartialObjectMetadataList{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	return m
}

func newNodeMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	return m
}

// readOnly lists from a cache without copying: the caller only reads the objects.
var readOnly = client.UnsafeDisableDeepCopy

// podExists reports whether the cache knows a pod with uid.
func (j *Janitor) podExists(ctx context.Context, uid string) (bool, error) {
	pods := newPodMetaList()
	if err := j.cache.List(ctx, pods, client.MatchingFields{indexPodUID: uid}, readOnly); err != nil {
		return false, fmt.Errorf("look up pod %s in cache: %w", uid, err)
	}
	return len(pods.Items) > 0, nil
}

// nodeCached reports whether the cache knows node.
func (j *Janitor) nodeCached(ctx context.Context, node string) (bool, error) {
	err := j.cache.Get(ctx, client.ObjectKey{Name: node}, newNodeMeta())
	if err == nil {
		return true, nil
	}
	if client.IgnoreNotFound(err) == nil {
		return false, nil
	}
	return false, fmt.Errorf("look up node %s in cache: %w", node, err)
}

// mountpointPodNode is the node a Mountpoint Pod runs or is meant to run on: spec.nodeName, else
// the node its required node affinity names by metadata.name (a pod not scheduled yet); "" when
// neither says. The kubernetes.io/hostname label is not trusted: it may differ from the node
// name, and a wrong node would make the janitor look for the pod's attachment in the wrong place.
func mountpointPodNode(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	aff := pod.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range term.MatchFields {
			if r.Key == "metadata.name" && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 {
				return r.Values[0]
			}
		}
	}
	return ""
}

// isMountpointPod reports whether a pod in the Mountpoint namespace was made by the driver: only
// those carry the driver-version label, and only those are the janitor's to remove.
func isMountpointPod(labels map[string]string) bool {
	_, ok := labels[s3csiv2.LabelDriverVersion]
	return ok
}
