// Package v2 holds the MountpointS3PodAttachment API (s3.csi.scality.com/v2), the record of which
// workload pods use which Mountpoint Pod on a node. It is the source of truth of the mount path:
// events on the bus only say that it changed.
//
// +kubebuilder:object:generate=true
// +groupName=s3.csi.scality.com
package v2

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of the attachment objects.
	GroupVersion = schema.GroupVersion{Group: "s3.csi.scality.com", Version: "v2"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
