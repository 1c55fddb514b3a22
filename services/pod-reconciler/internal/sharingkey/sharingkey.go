// Package sharingkey derives the sharing key of a workload's volume: the fields on which
// workloads must agree to share one Mountpoint Pod, and under which a MountpointS3PodAttachment
// (S3PA) records them. The pod-reconciler derives it to find or create the S3PA of a workload;
// the node-agent derives none: it finds the S3PA that serves a NodePublishVolume by node, volume
// and the workload's UID recorded in it.
//
// Normalisation is deliberately minimal so that attachments written by the Scality CSI Driver
// for S3 v2 keep matching:
//   - mount options are the PersistentVolume's spec.mountOptions joined by "," in their stored
//     order, with no sorting, trimming or deduplication, as the Scality v2 driver stored them.
//     The kubelet sends NodePublishVolume the same options deduplicated and sorted, so the
//     node-agent compares a request's mount flags with an attachment's as sets;
//   - the fsGroup is the workload pod's spec.securityContext.fsGroup in decimal, "" when unset;
//   - an empty authentication source (v2 attachments have none) means "driver".
package sharingkey

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// VolumeAttributeAuthenticationSource is the PersistentVolume volumeAttributes key that selects
// the credentials of a volume (the volume context key of the same name).
const VolumeAttributeAuthenticationSource = "authenticationSource"

// Key is the sharing key. Two workloads share a Mountpoint Pod exactly when their keys are
// equal; Key is comparable, so == is the test.
type Key struct {
	NodeName             string
	PersistentVolumeName string
	// VolumeID is the PersistentVolume's CSI volumeHandle.
	VolumeID string
	// MountOptions is MountOptions(pv).
	MountOptions string
	// WorkloadFSGroup is the workload's fsGroup in decimal, "" when it sets none.
	WorkloadFSGroup string
	// AuthenticationSource is one of the s3csiv2.AuthenticationSource* values, never "".
	AuthenticationSource string
	// WorkloadNamespace and WorkloadServiceAccountName are set only when the credentials are
	// per pod (AuthenticationSourcePod): pods of different identities never share a mount.
	WorkloadNamespace          string
	WorkloadServiceAccountName string
	// ReadOnly is true when the workload mounts the volume read-only.
	ReadOnly bool
}

// MountOptions is the mount-options field of the key: pv's spec.mountOptions joined by ",",
// as the Scality CSI Driver for S3 v2 writes it.
func MountOptions(pv *corev1.PersistentVolume) string {
	return strings.Join(pv.Spec.MountOptions, ",")
}

// FSGroup is the fsGroup field of the key for a workload pod.
func FSGroup(pod *corev1.Pod) string {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		return strconv.FormatInt(*sc.FSGroup, 10)
	}
	return ""
}

// AuthenticationSource returns the authentication source of a CSI PersistentVolume source:
// its authenticationSource volume attribute, "driver" when the attribute is absent or empty.
// An unknown value is an error: guessing could mount with the wrong credentials.
func AuthenticationSource(csi *corev1.CSIPersistentVolumeSource) (string, error) {
	if csi == nil {
		return "", fmt.Errorf("read authentication source: not a CSI volume")
	}
	switch v := csi.VolumeAttributes[VolumeAttributeAuthenticationSource]; v {
	case "", s3csiv2.AuthenticationSourceDriver:
		return s3csiv2.AuthenticationSourceDriver, nil
	case s3csiv2.AuthenticationSourceSecret, s3csiv2.AuthenticationSourcePod:
		return v, nil
	default:
		return "", fmt.Errorf("read authentication source: volume attribute %s=%q is not one of %q, %q, %q",
			VolumeAttributeAuthenticationSource, v, s3csiv2.AuthenticationSourceDriver,
			s3csiv2.AuthenticationSourceSecret, s3csiv2.AuthenticationSourcePod)
	}
}

// ReadOnly reports whether a workload mounts pv read-only through the pod volume that names
// its claim: the pod volume's persistentVolumeClaim.readOnly or the PV's csi.readOnly, the two
// sources the kubelet combines into NodePublishVolume's readonly flag.
func ReadOnly(claim *corev1.PersistentVolumeClaimVolumeSource, pv *corev1.PersistentVolume) bool {
	return (claim != nil && claim.ReadOnly) || (pv.Spec.CSI != nil && pv.Spec.CSI.ReadOnly)
}

// ForWorkload derives the key of a workload pod scheduled on pod.Spec.NodeName that mounts pv
// through the pod volume claim. pv must be a CSI PersistentVolume.
func ForWorkload(pod *corev1.Pod, claim *corev1.PersistentVolumeClaimVolumeSource, pv *corev1.PersistentVolume) (Key, error) {
	if pv.Spec.CSI == nil {
		return Key{}, fmt.Errorf("derive sharing key of PersistentVolume %s: not a CSI volume", pv.Name)
	}
	auth, err := AuthenticationSource(pv.Spec.CSI)
	if err != nil {
		return Key{}, fmt.Errorf("derive sharing key of PersistentVolume %s: %w", pv.Name, err)
	}
	k := Key{
		NodeName:             pod.Spec.NodeName,
		PersistentVolumeName: pv.Name,
		VolumeID:             pv.Spec.CSI.VolumeHandle,
		MountOptions:         MountOptions(pv),
		WorkloadFSGroup:      FSGroup(pod),
		AuthenticationSource: auth,
		ReadOnly:             ReadOnly(claim, pv),
	}
	if auth == s3csiv2.AuthenticationSourcePod {
		k.WorkloadNamespace = pod.Namespace
		k.WorkloadServiceAccountName = serviceAccount(pod)
	}
	return k, nil
}

// serviceAccount is the pod's service account; the API server defaults "" to "default".
func serviceAccount(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName == "" {
		return "default"
	}
	return pod.Spec.ServiceAccountName
}

// FromSpec is the key an attachment records, normalised like ForWorkload's.
func FromSpec(spec *s3csiv2.MountpointS3PodAttachmentSpec) Key {
	k := Key{
		NodeName:                   spec.NodeName,
		PersistentVolumeName:       spec.PersistentVolumeName,
		VolumeID:                   spec.VolumeID,
		MountOptions:               spec.MountOptions,
		WorkloadFSGroup:            spec.WorkloadFSGroup,
		AuthenticationSource:       spec.AuthenticationSource,
		WorkloadNamespace:          spec.WorkloadNamespace,
		WorkloadServiceAccountName: spec.WorkloadServiceAccountName,
		ReadOnly:                   spec.ReadOnly,
	}
	if k.AuthenticationSource == "" {
		k.AuthenticationSource = s3csiv2.AuthenticationSourceDriver
	}
	return k
}

// Matches reports whether the attachment spec records this key.
func (k Key) Matches(spec *s3csiv2.MountpointS3PodAttachmentSpec) bool {
	return FromSpec(spec) == k
}

// Spec is the key part of a new attachment's spec (no workloads yet).
func (k Key) Spec() s3csiv2.MountpointS3PodAttachmentSpec {
	return s3csiv2.MountpointS3PodAttachmentSpec{
		NodeName:                   k.NodeName,
		PersistentVolumeName:       k.PersistentVolumeName,
		VolumeID:                   k.VolumeID,
		MountOptions:               k.MountOptions,
		WorkloadFSGroup:            k.WorkloadFSGroup,
		AuthenticationSource:       k.AuthenticationSource,
		WorkloadNamespace:          k.WorkloadNamespace,
		WorkloadServiceAccountName: k.WorkloadServiceAccountName,
		ReadOnly:                   k.ReadOnly,
	}
}

// SelectableFields are the key's fields the CRD declares selectable, usable both with a cache
// index (client.MatchingFields) and as a server-side field selector. They narrow a lookup to
// a handful of candidates; the caller must still keep only those for which Matches is true,
// because authentication source, identity and read-only are not selectable (and an
// attachment written by the v2 driver has no authentication source at all).
func (k Key) SelectableFields() client.MatchingFields {
	return client.MatchingFields{
		s3csiv2.FieldNodeName:             k.NodeName,
		s3csiv2.FieldPersistentVolumeName: k.PersistentVolumeName,
		s3csiv2.FieldVolumeID:             k.VolumeID,
		s3csiv2.FieldMountOptions:         k.MountOptions,
		s3csiv2.FieldWorkloadFSGroup:      k.WorkloadFSGroup,
	}
}

// String is a stable, unambiguous rendering of the key, usable as a map key and in logs.
func (k Key) String() string {
	return fmt.Sprintf("node=%q pv=%q volumeID=%q mountOptions=%q fsGroup=%q auth=%q namespace=%q serviceAccount=%q readOnly=%t",
		k.NodeName, k.PersistentVolumeName, k.VolumeID, k.MountOptions, k.WorkloadFSGroup,
		k.AuthenticationSource, k.WorkloadNamespace, k.WorkloadServiceAccountName, k.ReadOnly)
}
