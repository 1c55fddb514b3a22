package events

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/s3csi/s3csi/shared/kubenames"
	"github.com/s3csi/s3csi/shared/mppod"
)

// nameChecks maps the payload fields (proto names, in any message of the catalog) that name a
// Kubernetes object to the rule the API server applies to that name.
//
// Problem: consumers join names from events into host paths as root (a Mountpoint Pod's source
// dir), and anyone who can publish on the bus can put "../.." in a payload.
// Solution: Decode refuses a payload whose names do not have the shape of real names, so such
// an event wraps ErrInvalidEvent and is terminated, never handed to a handler.
// Invariant: every set field listed here has passed its check in a Decoded payload.
func nameChecks(field protoreflect.Name) func(string) error {
	switch field {
	case "node":
		return kubenames.Node
	case "mountpoint_pod_name":
		return mppod.ValidateName
	case "pv_name":
		return kubenames.PV
	case "pod_name", "workload_name":
		return kubenames.Pod
	case "attachment_name":
		return kubenames.Object
	case "pod_namespace", "workload_namespace":
		return kubenames.Namespace
	case "pod_uid", "workload_pod_uid", "mountpoint_pod_uid", "workload_pod_uids":
		return kubenames.UID
	}
	return nil
}

// checkNames applies nameChecks to every set string field of m and of its nested messages.
func checkNames(m protoreflect.Message) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = checkNames(l.Get(i).Message())
			}
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			err = checkNames(v.Message())
		case fd.Kind() == protoreflect.StringKind && !fd.IsMap():
			check := nameChecks(fd.Name())
			if check == nil {
				return true
			}
			if fd.IsList() {
				l := v.List()
				for i := 0; i < l.Len() && err == nil; i++ {
					err = check(l.Get(i).String())
				}
			} else {
				err = check(v.String())
			}
			if err != nil {
				err = fmt.Errorf("field %s: %w", fd.Name(), err)
			}
		}
		return err == nil
	})
	return err
}
