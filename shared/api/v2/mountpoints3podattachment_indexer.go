package v2

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Spec fields that are indexed in controller-runtime caches and, for the ones the CRD declares
// selectable, filtered on by the API server. The names are the field paths, so a value is usable
// both with client.MatchingFields and as a server-side field selector.
const (
	FieldNodeName                   = "spec.nodeName"
	FieldPersistentVolumeName       = "spec.persistentVolumeName"
	FieldVolumeID                   = "spec.volumeID"
	FieldMountOptions               = "spec.mountOptions"
	FieldWorkloadFSGroup            = "spec.workloadFSGroup"
	FieldAuthenticationSource       = "spec.authenticationSource"
	FieldWorkloadNamespace          = "spec.workloadNamespace"
	FieldWorkloadServiceAccountName = "spec.workloadServiceAccountName"
)

// SelectableFields are the fields the API server filters on (the CRD's selectableFields).
var SelectableFields = []string{
	FieldNodeName, FieldPersistentVolumeName, FieldVolumeID, FieldMountOptions, FieldWorkloadFSGroup,
}

// fieldValues extracts the value of every indexed field from a spec.
var fieldValues = map[string]func(*MountpointS3PodAttachmentSpec) string{
	FieldNodeName:                   func(s *MountpointS3PodAttachmentSpec) string { return s.NodeName },
	FieldPersistentVolumeName:       func(s *MountpointS3PodAttachmentSpec) string { return s.PersistentVolumeName },
	FieldVolumeID:                   func(s *MountpointS3PodAttachmentSpec) string { return s.VolumeID },
	FieldMountOptions:               func(s *MountpointS3PodAttachmentSpec) string { return s.MountOptions },
	FieldWorkloadFSGroup:            func(s *MountpointS3PodAttachmentSpec) string { return s.WorkloadFSGroup },
	FieldAuthenticationSource:       func(s *MountpointS3PodAttachmentSpec) string { return s.AuthenticationSource },
	FieldWorkloadNamespace:          func(s *MountpointS3PodAttachmentSpec) string { return s.WorkloadNamespace },
	FieldWorkloadServiceAccountName: func(s *MountpointS3PodAttachmentSpec) string { return s.WorkloadServiceAccountName },
}

// IndexedFields lists every field IndexFields registers, in a stable order.
func IndexedFields() []string {
	return []string{
		FieldNodeName, FieldPersistentVolumeName, FieldVolumeID, FieldMountOptions, FieldWorkloadFSGroup,
		FieldAuthenticationSource, FieldWorkloadNamespace, FieldWorkloadServiceAccountName,
	}
}

// FieldValue returns the value of an indexed field of an attachment, and false for an unknown field.
func FieldValue(s3pa *MountpointS3PodAttachment, field string) (string, bool) {
	get, ok := fieldValues[field]
	if !ok {
		return "", false
	}
	return get(&s3pa.Spec), true
}

// IndexFields registers a cache index for each of the given fields (all of IndexedFields when none
// are given), so that lookups by sharing key are index reads, not scans of every attachment.
func IndexFields(ctx context.Context, indexer client.FieldIndexer, fields ...string) error {
	if len(fields) == 0 {
		fields = IndexedFields()
	}
	for _, field := range fields {
		get, ok := fieldValues[field]
		if !ok {
			return fmt.Errorf("index field %q: not an indexed field of MountpointS3PodAttachment", field)
		}
		extract := func(obj client.Object) []string {
			s3pa, ok := obj.(*MountpointS3PodAttachment)
			if !ok {
				return nil
			}
			return []string{get(&s3pa.Spec)}
		}
		if err := indexer.IndexField(ctx, &MountpointS3PodAttachment{}, field, extract); err != nil {
			return fmt.Errorf("index field %q: %w", field, err)
		}
	}
	return nil
}
