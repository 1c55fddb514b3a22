package events

import (
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/events/eventspb"
)

// Type is the CloudEvents type of an event; one per payload message in eventspb.
type Type string

// The event catalog. A new version of a payload is a new Type (…v2), never an
// incompatible change to an existing one.
const (
	TypeWorkloadScheduled      Type = "io.s3csi.workload.scheduled.v1"
	TypeAttachmentAssigned     Type = "io.s3csi.attachment.assigned.v1"
	TypeMountpointNeedsUnmount Type = "io.s3csi.mountpoint.needs-unmount.v1"
	TypeVolumePublished        Type = "io.s3csi.volume.published.v1"
	TypeVolumeUnpublished      Type = "io.s3csi.volume.unpublished.v1"
	TypeMountFailed            Type = "io.s3csi.mount.failed.v1"
	TypeVolumeCreated          Type = "io.s3csi.volume.created.v1"
	TypeVolumeDeleted          Type = "io.s3csi.volume.deleted.v1"
	TypeAttachmentCleaned      Type = "io.s3csi.attachment.cleaned.v1"
)

const (
	// StreamName is the one JetStream stream that keeps every event for audit and replay.
	StreamName = "S3CSI_EVENTS"
	// SubjectPrefix is the first two tokens of every event subject.
	SubjectPrefix = "s3csi.events"
)

// spec is what the bus knows about one Type.
type spec struct {
	// stem is the subject without the node token, e.g. s3csi.events.attachment.assigned.
	stem string
	// nodeScoped events carry a node field and are published on <stem>.<NodeToken(node)>.
	nodeScoped bool
	newPayload func() proto.Message
	// required lists the payload fields (proto names) that must be set: non-empty strings,
	// non-empty lists. "node" is implied for node-scoped types.
	required []string
	// anyOf, when set, lists fields of which at least one must be set.
	anyOf []string
}

// Types returns every Type of the catalog, in a stable order.
func Types() []Type {
	return []Type{
		TypeWorkloadScheduled, TypeAttachmentAssigned, TypeMountpointNeedsUnmount,
		TypeVolumePublished, TypeVolumeUnpublished, TypeMountFailed,
		TypeVolumeCreated, TypeVolumeDeleted, TypeAttachmentCleaned,
	}
}

// specOf is a switch rather than a package map so that no package state can be mutated.
func specOf(t Type) (spec, bool) {
	p := SubjectPrefix + "."
	switch t {
	case TypeWorkloadScheduled:
		return spec{stem: p + "workload.scheduled", nodeScoped: true,
			newPayload: func() proto.Message { return &eventspb.WorkloadScheduled{} },
			required:   []string{"pod_namespace", "pod_name", "pod_uid"}}, true
	case TypeAttachmentAssigned:
		return spec{stem: p + "attachment.assigned", nodeScoped: true,
			newPayload: func() proto.Message { return &eventspb.AttachmentAssigned{} },
			required:   []string{"pv_name", "workload_pod_uid", "attachment_name", "mountpoint_pod_name"}}, true
	case TypeMountpointNeedsUnmount:
		return spec{stem: p + "mountpoint.needs-unmount", nodeScoped: true,
			newPayload: func() proto.Message { return &eventspb.MountpointNeedsUnmount{} },
			required:   []string{"mountpoint_pod_name"}}, true
	case TypeVolumePublished:
		return spec{stem: p + "volume.published", nodeScoped: true,
			newPayload: func() proto.Message { return &eventspb.VolumePublished{} },
			required:   []string{"volume_id", "workload_pod_uid", "target_path"}}, true
	case TypeVolumeUnpublished:
		return spec{stem: p + "volume.unpublished", nodeScoped: true,
			newPayload: func() proto.Message { return &eventspb.VolumeUnpublished{} },
			required:   []string{"volume_id", "workload_pod_uid", "target_path"}}, true
	case TypeMountFailed:
		return spec{stem: p + "mount.failed", nodeScoped: true,
			newPayload: func() proto.Message { return &eventspb.MountFailed{} },
			required:   []string{"volume_id", "reason"}}, true
	case TypeVolumeCreated:
		return spec{stem: p + "volume.created",
			newPayload: func() proto.Message { return &eventspb.VolumeCreated{} },
			required:   []string{"volume_id", "bucket_name"}}, true
	case TypeVolumeDeleted:
		return spec{stem: p + "volume.deleted",
			newPayload: func() proto.Message { return &eventspb.VolumeDeleted{} },
			required:   []string{"volume_id", "bucket_name"}}, true
	case TypeAttachmentCleaned:
		return spec{stem: p + "attachment.cleaned", nodeScoped: true,
			newPayload: func() proto.Message { return &eventspb.AttachmentCleaned{} },
			required:   []string{"reason"},
			anyOf:      []string{"attachment_name", "mountpoint_pod_name"}}, true
	}
	return spec{}, false
}

func lookupSpec(t Type) (spec, error) {
	s, ok := specOf(t)
	if !ok {
		return spec{}, fmt.Errorf("look up event type %q: %w", t, ErrUnknownType)
	}
	return s, nil
}

// TypeOf returns the Type whose payload message is m.
func TypeOf(m proto.Message) (Type, error) {
	switch m.(type) {
	case *eventspb.WorkloadScheduled:
		return TypeWorkloadScheduled, nil
	case *eventspb.AttachmentAssigned:
		return TypeAttachmentAssigned, nil
	case *eventspb.MountpointNeedsUnmount:
		return TypeMountpointNeedsUnmount, nil
	case *eventspb.VolumePublished:
		return TypeVolumePublished, nil
	case *eventspb.VolumeUnpublished:
		return TypeVolumeUnpublished, nil
	case *eventspb.MountFailed:
		return TypeMountFailed, nil
	case *eventspb.VolumeCreated:
		return TypeVolumeCreated, nil
	case *eventspb.VolumeDeleted:
		return TypeVolumeDeleted, nil
	case *eventspb.AttachmentCleaned:
		return TypeAttachmentCleaned, nil
	}
	return "", fmt.Errorf("look up event type of %T: %w", m, ErrUnknownType)
}

// Known reports whether t is in the catalog.
func (t Type) Known() bool {
	_, ok := specOf(t)
	return ok
}

// NodeScoped reports whether events of type t concern one node and carry its name.
func (t Type) NodeScoped() bool {
	s, ok := specOf(t)
	return ok && s.nodeScoped
}

// Stem is the subject of t without the node token ("" for an unknown type).
func (t Type) Stem() string {
	s, _ := specOf(t)
	return s.stem
}

// NewPayload returns an empty payload message of type t, or nil for an unknown type.
func (t Type) NewPayload() proto.Message {
	s, ok := specOf(t)
	if !ok {
		return nil
	}
	return s.newPayload()
}

// dnsSubdomain is a Kubernetes node name (RFC 1123 subdomain). It never contains '_', '*', '>'
// or whitespace, which is what makes NodeToken injective and subject-safe.
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// ValidNode reports whether node is a valid Kubernetes node name.
func ValidNode(node string) bool {
	return len(node) <= 253 && dnsSubdomain.MatchString(node)
}

// NodeToken is node as one NATS subject token.
//
// Problem: node names are DNS subdomains and may contain dots, which split subject tokens, so
// "a.b" would be published on …assigned.a.b and escape the filter …assigned.<node>.
// Solution: map '.' to '_'.
// Invariant: the mapping is injective because '_' never occurs in a node name.
func NodeToken(node string) string {
	return strings.ReplaceAll(node, ".", "_")
}

// Subject is the subject an event of type t about node is published on: <stem>.<NodeToken(node)>
// for node-scoped types, <stem> for cluster-scoped ones (which must be given node "").
func Subject(t Type, node string) (string, error) {
	s, err := lookupSpec(t)
	if err != nil {
		return "", err
	}
	if !s.nodeScoped {
		if node != "" {
			return "", fmt.Errorf("build subject of %s: type is cluster-scoped but node %q was given", t, node)
		}
		return s.stem, nil
	}
	if !ValidNode(node) {
		return "", fmt.Errorf("build subject of %s: invalid node name %q", t, node)
	}
	return s.stem + "." + NodeToken(node), nil
}

// NodeSubjects returns the filter subjects of a consumer interested in types (every type when
// none is given) about node. Node "" means every node (<stem>.*). Cluster-scoped types are not
// about a node, so they are included unfiltered (<stem>) whenever they are selected.
// Duplicated types are listed once: JetStream rejects overlapping filter subjects.
func NodeSubjects(node string, types ...Type) []string {
	if len(types) == 0 {
		types = Types()
	}
	token := "*"
	if node != "" {
		token = NodeToken(node)
	}
	seen := make(map[Type]bool, len(types))
	subjects := make([]string, 0, len(types))
	for _, t := range types {
		s, ok := specOf(t)
		if !ok || seen[t] {
			continue
		}
		seen[t] = true
		if s.nodeScoped {
			subjects = append(subjects, s.stem+"."+token)
		} else {
			subjects = append(subjects, s.stem)
		}
	}
	return subjects
}
