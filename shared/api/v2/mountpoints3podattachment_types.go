package v2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Authentication sources: where the Mountpoint Pod's S3 credentials come from.
const (
	// AuthenticationSourceDriver uses the credentials the driver itself is configured with.
	AuthenticationSourceDriver = "driver"
	// AuthenticationSourceSecret uses the volume's nodePublishSecretRef.
	AuthenticationSourceSecret = "secret"
	// AuthenticationSourcePod uses the workload pod's service account.
	AuthenticationSourcePod = "pod"
)

// LabelDriverVersion names the driver version that created an attachment or a Mountpoint Pod;
// a Mountpoint Pod of another version gets no new workload.
const LabelDriverVersion = "s3.csi.scality.com/mounted-by-csi-driver-version"

// MountpointS3PodAttachmentSpec is the sharing key of a Mountpoint Pod and the workloads that use it.
//
// Workloads share a Mountpoint Pod only when every key field is equal, so the key fields are
// immutable: a changed key is a new attachment. Objects written by the Scality CSI Driver for S3 v2
// carry only the first five fields and stay valid.
type MountpointS3PodAttachmentSpec struct {
	// NodeName is the node where the workloads and their Mountpoint Pod run.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`

	// PersistentVolumeName is the name of the PersistentVolume being mounted.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="persistentVolumeName is immutable"
	PersistentVolumeName string `json:"persistentVolumeName"`

	// VolumeID is the PersistentVolume's CSI volumeHandle.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeID is immutable"
	VolumeID string `json:"volumeID"`

	// MountOptions are the PersistentVolume's mount options, joined by ",".
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="mountOptions is immutable"
	MountOptions string `json:"mountOptions"`

	// WorkloadFSGroup is the workloads' fsGroup, empty when they set none.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="workloadFSGroup is immutable"
	WorkloadFSGroup string `json:"workloadFSGroup"`

	// AuthenticationSource says where credentials come from; empty means "driver".
	// +optional
	// +kubebuilder:validation:Enum=driver;secret;pod
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="authenticationSource is immutable"
	AuthenticationSource string `json:"authenticationSource,omitempty"`

	// WorkloadNamespace is the workloads' namespace, set when credentials are per pod ("pod").
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="workloadNamespace is immutable"
	WorkloadNamespace string `json:"workloadNamespace,omitempty"`

	// WorkloadServiceAccountName is the workloads' service account, set when credentials are per pod.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="workloadServiceAccountName is immutable"
	WorkloadServiceAccountName string `json:"workloadServiceAccountName,omitempty"`

	// ReadOnly is true when the volume is mounted read-only, so read-only and read-write
	// workloads never share a FUSE mount.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="readOnly is immutable"
	ReadOnly bool `json:"readOnly,omitempty"`

	// MountpointS3PodAttachments maps a Mountpoint Pod name to the workloads it serves.
	// +optional
	MountpointS3PodAttachments map[string][]WorkloadAttachment `json:"mountpointS3PodAttachments,omitempty"`
}

// WorkloadAttachment records one workload pod served by a Mountpoint Pod.
type WorkloadAttachment struct {
	// WorkloadPodUID is the UID of the workload pod.
	// +kubebuilder:validation:MinLength=1
	WorkloadPodUID string `json:"workloadPodUID"`

	// AttachmentTime is when the workload was assigned to the Mountpoint Pod.
	AttachmentTime metav1.Time `json:"attachmentTime"`
}

// MountpointS3PodAttachment records which workload pods on a node use which Mountpoint Pod for
// one volume and sharing key.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=s3pa
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="PV Name",type=string,JSONPath=`.spec.persistentVolumeName`
// +kubebuilder:printcolumn:name="Mount Options",type=string,JSONPath=`.spec.mountOptions`,priority=1
// +kubebuilder:printcolumn:name="Read-only",type=boolean,JSONPath=`.spec.readOnly`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:selectablefield:JSONPath=`.spec.persistentVolumeName`
// +kubebuilder:selectablefield:JSONPath=`.spec.volumeID`
// +kubebuilder:selectablefield:JSONPath=`.spec.mountOptions`
// +kubebuilder:selectablefield:JSONPath=`.spec.workloadFSGroup`
type MountpointS3PodAttachment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MountpointS3PodAttachmentSpec `json:"spec"`
}

// MountpointS3PodAttachmentList is a list of MountpointS3PodAttachment.
//
// +kubebuilder:object:root=true
type MountpointS3PodAttachmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []MountpointS3PodAttachment `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MountpointS3PodAttachment{}, &MountpointS3PodAttachmentList{})
}
