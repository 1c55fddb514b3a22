package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/sharingkey"
)

// workloadVolume is one s3csi volume of a workload pod.
type workloadVolume struct {
	pv  *corev1.PersistentVolume
	key sharingkey.Key
}

// hasClaims reports whether the pod mounts any PersistentVolumeClaim.
func hasClaims(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return true
		}
	}
	return false
}

// resolveVolumes returns the pod's volumes that are bound to PVs of this driver. unbound is true
// when some claim is not bound yet (or its PV not yet known), so the pod must be looked at
// again. Volumes of other drivers are left out; a volume of this driver whose key cannot be
// derived is reported in bad, the others still proceed. Two volumes of the pod with one
// volumeHandle are reported in bad too (see sameHandle), and both still proceed.
func resolveVolumes(ctx context.Context, c client.Reader, pod *corev1.Pod) (vols []workloadVolume, unbound bool, bad []error) {
	seen := map[string]bool{}
	byHandle := map[string]handleUse{}
	for _, v := range pod.Spec.Volumes {
		claim := v.PersistentVolumeClaim
		if claim == nil {
			continue
		}
		pv, err := boundVolume(ctx, c, pod.Namespace, claim.ClaimName)
		if err != nil {
			unbound = true
			continue
		}
		if pv == nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != mppod.DriverName {
			continue
		}
		use := handleUse{volume: v.Name, claim: claim.ClaimName, pv: pv.Name}
		if first, ok := byHandle[pv.Spec.CSI.VolumeHandle]; ok {
			bad = append(bad, sameHandle(first, use, pv.Spec.CSI.VolumeHandle))
		} else {
			byHandle[pv.Spec.CSI.VolumeHandle] = use
		}
		key, err := sharingkey.ForWorkload(pod, claim, pv)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		if seen[key.String()] {
			continue // the same claim mounted twice shares one attachment
		}
		seen[key.String()] = true
		vols = append(vols, workloadVolume{pv: pv, key: key})
	}
	return vols, unbound, bad
}

// handleUse is a volume of a pod and the claim and PV it resolved to.
type handleUse struct{ volume, claim, pv string }

// sameHandle explains two volumes of one pod with one volumeHandle.
//
// Problem: kubelet names a CSI volume by its driver and volumeHandle alone, so it mounts one of
// the two and waits for the other for ever: the pod stays ContainerCreating, and two minutes
// later kubelet's event says only "unmounted volumes=[...]".
// Solution: say it on the workload as soon as the pod is scheduled, with the fix.
func sameHandle(first, second handleUse, handle string) error {
	if first.pv == second.pv {
		return fmt.Errorf("volumes %q and %q both use claim %q (PersistentVolume %s): kubelet mounts a volume once "+
			"per pod and waits for the other one for ever, so the pod stays ContainerCreating; use one volume "+
			"with several volumeMounts", first.volume, second.volume, second.claim, second.pv)
	}
	return fmt.Errorf("volumes %q and %q use PersistentVolumes %s and %s, which have the same volumeHandle %q: "+
		"kubelet mounts a volume handle once per pod and waits for the other volume for ever, so the pod stays "+
		"ContainerCreating; give each PersistentVolume its own volumeHandle (several may name the same bucket "+
		"in volumeAttributes.bucketName)", first.volume, second.volume, first.pv, second.pv, handle)
}

// errNotBound says that a claim is not (yet) bound both ways to a PV.
var errNotBound = fmt.Errorf("claim not bound")

// boundVolume returns the PV bound to the claim namespace/name, nil when that PV is not a CSI
// volume, and errNotBound (or a read error) when the binding is not complete: the claim names
// no volume yet, the PV is unknown, or the PV's claimRef does not point back at the claim.
func boundVolume(ctx context.Context, c client.Reader, namespace, name string) (*corev1.PersistentVolume, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pvc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errNotBound
		}
		return nil, fmt.Errorf("get claim %s/%s: %w", namespace, name, err)
	}
	if pvc.Spec.VolumeName == "" {
		return nil, errNotBound
	}
	pv := &corev1.PersistentVolume{}
	if err := c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errNotBound
		}
		return nil, fmt.Errorf("get PersistentVolume %s: %w", pvc.Spec.VolumeName, err)
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace != namespace || ref.Name != name || (ref.UID != "" && ref.UID != pvc.UID) {
		return nil, errNotBound
	}
	if pv.Spec.CSI == nil {
		return nil, nil
	}
	return pv, nil
}
