package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/mppod"
)

// Cache indexes this package registers.
const (
	// indexPodUID finds a cached pod by UID (workloads are recorded by UID).
	indexPodUID = "metadata.uid"
	// indexPodClaims finds the pods that mount a claim, by "<namespace>/<claim>".
	indexPodClaims = "s3csi.spec.volumes.claims"
	// indexWorkloadUIDs finds the S3PAs that record a workload UID.
	indexWorkloadUIDs = "s3csi.spec.workloadPodUIDs"
	// indexMountpointPods finds the S3PAs that name a Mountpoint Pod.
	indexMountpointPods = "s3csi.spec.mountpointPods"
)

// CacheOptions returns the cache configuration of the pod-reconciler's manager.
//
// Problem: the reconciler watches every pod, claim and volume of the cluster; cached whole,
// a large cluster costs gigabytes (container specs, status, managed fields).
// Solution: a transform keeps only the fields the controllers read (see stripPod, stripClaim,
// stripVolume) before an object enters the cache.
// Invariant: cached pods, claims and volumes are partial, so the controllers never Update one
// of them (which would write the missing fields away); they Patch, Create and Delete only.
// Attachments are cached whole and may be updated.
func CacheOptions(mountpointNamespace string) cache.Options {
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                   {Transform: stripPod(mountpointNamespace)},
			&corev1.PersistentVolumeClaim{}: {Transform: stripClaim},
			&corev1.PersistentVolume{}:      {Transform: stripVolume},
		},
	}
}

// stripPod keeps what the controllers read of a pod: identity, node, PVC volumes, fsGroup,
// service account, phase and the PodScheduled condition; labels, annotations and the containers'
// names and images only of pods in the Mountpoint namespace.
func stripPod(mountpointNamespace string) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		out := &corev1.Pod{
			TypeMeta:   pod.TypeMeta,
			ObjectMeta: stripMeta(&pod.ObjectMeta, pod.Namespace == mountpointNamespace),
			Spec: corev1.PodSpec{
				NodeName:           pod.Spec.NodeName,
				ServiceAccountName: pod.Spec.ServiceAccountName,
			},
			Status: corev1.PodStatus{Phase: pod.Status.Phase, Reason: pod.Status.Reason, Message: pod.Status.Message},
		}
		if pod.Namespace == mountpointNamespace {
			for _, c := range pod.Spec.Containers {
				out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image})
			}
		}
		if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
			out.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: sc.FSGroup}
		}
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: v.PersistentVolumeClaim,
				}})
			}
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				out.Status.Conditions = []corev1.PodCondition{c}
			}
		}
		return out, nil
	}
}

func stripMeta(m *metav1.ObjectMeta, keepLabels bool) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
	}
	if keepLabels {
		out.Labels = m.Labels
		out.Annotations = m.Annotations
	}
	return out
}

// stripClaim keeps a claim's identity and the volume it is bound to.
func stripClaim(obj any) (any, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return obj, nil
	}
	return &corev1.PersistentVolumeClaim{
		TypeMeta:   pvc.TypeMeta,
		ObjectMeta: stripMeta(&pvc.ObjectMeta, false),
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pvc.Spec.VolumeName},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: pvc.Status.Phase},
	}, nil
}

// stripVolume keeps the claim reference of every PV, and the CSI source and mount options of
// the PVs of this driver only.
func stripVolume(obj any) (any, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return obj, nil
	}
	out := &corev1.PersistentVolume{
		TypeMeta:   pv.TypeMeta,
		ObjectMeta: stripMeta(&pv.ObjectMeta, false),
		Spec:       corev1.PersistentVolumeSpec{ClaimRef: pv.Spec.ClaimRef},
	}
	if csi := pv.Spec.CSI; csi != nil && csi.Driver == mppod.DriverName {
		out.Spec.CSI = csi
		out.Spec.MountOptions = pv.Spec.MountOptions
	}
	return out, nil
}

// addIndexes registers the cache indexes the controllers look up by.
func addIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := s3csiv2.IndexFields(ctx, idx, s3csiv2.SelectableFields...); err != nil {
		return fmt.Errorf("index attachments: %w", err)
	}
	indexes := []struct {
		obj     client.Object
		field   string
		extract client.IndexerFunc
	}{
		{&corev1.Pod{}, indexPodUID, func(o client.Object) []string { return []string{string(o.GetUID())} }},
		{&corev1.Pod{}, indexPodClaims, podClaims},
		{&s3csiv2.MountpointS3PodAttachment{}, indexWorkloadUIDs, workloadUIDs},
		{&s3csiv2.MountpointS3PodAttachment{}, indexMountpointPods, mountpointPodNames},
	}
	for _, i := range indexes {
		if err := idx.IndexField(ctx, i.obj, i.field, i.extract); err != nil {
			return fmt.Errorf("index %s: %w", i.field, err)
		}
	}
	return nil
}

func podClaims(o client.Object) []string {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return nil
	}
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, pod.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

func workloadUIDs(o client.Object) []string {
	a, ok := o.(*s3csiv2.MountpointS3PodAttachment)
	if !ok {
		return nil
	}
	var out []string
	for _, ws := range a.Spec.MountpointS3PodAttachments {
		for _, w := range ws {
			out = append(out, w.WorkloadPodUID)
		}
	}
	return out
}

func mountpointPodNames(o client.Object) []string {
	a, ok := o.(*s3csiv2.MountpointS3PodAttachment)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(a.Spec.MountpointS3PodAttachments))
	for name := range a.Spec.MountpointS3PodAttachments {
		out = append(out, name)
	}
	return out
}
