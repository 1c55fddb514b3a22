package audit

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
)

// maxReasonLen bounds the reason shown for an invalid message: never its raw bytes.
const maxReasonLen = 300

// Record is one message of the stream as kubectl s3csi shows it.
type Record struct {
	// Seq is the stream sequence; Stored when the stream stored the message; Subject where.
	Seq     uint64    `json:"seq"`
	Stored  time.Time `json:"stored"`
	Subject string    `json:"subject"`
	// ID is the event id; Type the short event type (attachment.assigned); Node the node it is
	// about.
	ID   string `json:"id,omitempty"`
	Type string `json:"type,omitempty"`
	Node string `json:"node,omitempty"`
	// Pod is the workload pod the event is about, namespace/name when an event told it, else
	// its UID.
	Pod string `json:"pod,omitempty"`
	// Summary is the rest of the payload in a few words.
	Summary string `json:"summary,omitempty"`
	// Event is the CloudEvent as stored (valid events only).
	Event json.RawMessage `json:"event,omitempty"`
	// Invalid says why the message is not a valid event; Size is its size in bytes.
	Invalid string `json:"invalid,omitempty"`
	Size    int    `json:"size,omitempty"`
	// SincePrevious is the time since the previous record of the pod view (0 elsewhere).
	SincePrevious time.Duration `json:"sincePrevious,omitempty"`
}

// Names remembers what events said about names, so a later event that carries only a UID or a
// volume handle can be shown and selected by name.
type Names struct {
	pods map[string]string // pod UID -> namespace/name
	pvs  map[string]string // volume handle -> PV name
}

// NewNames returns an empty memory.
func NewNames() *Names {
	return &Names{pods: map[string]string{}, pvs: map[string]string{}}
}

// Learn records the names an event ties together.
func (n *Names) Learn(d *events.Decoded) {
	switch p := d.Payload.(type) {
	case *eventspb.WorkloadScheduled:
		n.pods[p.GetPodUid()] = p.GetPodNamespace() + "/" + p.GetPodName()
		for _, v := range p.GetVolumes() {
			n.volume(v.GetVolumeId(), v.GetPvName())
		}
	case *eventspb.AttachmentAssigned:
		if p.GetWorkloadName() != "" {
			n.pods[p.GetWorkloadPodUid()] = p.GetWorkloadNamespace() + "/" + p.GetWorkloadName()
		}
		n.volume(p.GetVolumeId(), p.GetPvName())
	case *eventspb.VolumePublished:
		n.volume(p.GetVolumeId(), p.GetPvName())
	case *eventspb.MountFailed:
		n.volume(p.GetVolumeId(), p.GetPvName())
	case *eventspb.VolumeCreated:
		// CreateVolume's name is the PersistentVolume's name the provisioner chose.
		n.volume(p.GetVolumeId(), p.GetRequestName())
	}
}

func (n *Names) volume(id, pv string) {
	if id != "" && pv != "" {
		n.pvs[id] = pv
	}
}

// Pod is namespace/name of the pod with uid when known, else uid.
func (n *Names) Pod(uid string) string {
	if name, ok := n.pods[uid]; ok {
		return name
	}
	return uid
}

// PV is the PV name of a volume handle when known, else "".
func (n *Names) PV(volumeID string) string { return n.pvs[volumeID] }

// NewRecord renders m, a message the selection kept; names must have learned m already.
func NewRecord(m events.StoredEvent, names *Names) Record {
	r := Record{Seq: m.Seq, Stored: m.Time.UTC(), Subject: m.Subject}
	if m.Err != nil {
		r.Invalid = truncate(clean(m.Err.Error()), maxReasonLen)
		r.Size = len(m.Data)
		return r
	}
	d := m.Event
	r.ID, r.Type, r.Node = d.Event.ID(), ShortType(d.Type), d.Node()
	r.Event = json.RawMessage(m.Data)
	r.Pod, r.Summary = summarize(d, names)
	return r
}

// summarize names the workload pod of d (namespace/name when known) and says the rest briefly.
func summarize(d *events.Decoded, names *Names) (pod, summary string) {
	var parts []string
	add := func(key, value string) {
		if value != "" {
			parts = append(parts, key+"="+clean(value))
		}
	}
	switch p := d.Payload.(type) {
	case *eventspb.WorkloadScheduled:
		pod = p.GetPodNamespace() + "/" + p.GetPodName()
		var pvs []string
		for _, v := range p.GetVolumes() {
			pvs = append(pvs, v.GetPvName())
		}
		add("uid", p.GetPodUid())
		add("pvs", strings.Join(pvs, ","))
	case *eventspb.AttachmentAssigned:
		pod = names.Pod(p.GetWorkloadPodUid())
		add("pv", p.GetPvName())
		add("s3pa", p.GetAttachmentName())
		add("mountpointPod", p.GetMountpointPodName())
	case *eventspb.MountpointNeedsUnmount:
		add("mountpointPod", p.GetMountpointPodName())
		add("pv", p.GetPvName())
		add("reason", p.GetReason())
	case *eventspb.VolumePublished:
		pod = names.Pod(p.GetWorkloadPodUid())
		add("pv", p.GetPvName())
		add("mountpointPod", p.GetMountpointPodName())
		if p.GetSharedSource() {
			parts = append(parts, "sharedSource")
		}
		if p.GetReadOnly() {
			parts = append(parts, "readOnly")
		}
		parts = append(parts, fmt.Sprintf("took=%s", time.Duration(p.GetDurationMs())*time.Millisecond))
	case *eventspb.VolumeUnpublished:
		pod = names.Pod(p.GetWorkloadPodUid())
		add("pv", names.PV(p.GetVolumeId()))
		add("volume", p.GetVolumeId())
	case *eventspb.MountFailed:
		pods := make([]string, 0, len(p.GetWorkloadPodUids()))
		for _, uid := range p.GetWorkloadPodUids() {
			pods = append(pods, names.Pod(uid))
		}
		pod = strings.Join(pods, ",")
		add("pv", p.GetPvName())
		add("mountpointPod", p.GetMountpointPodName())
		add("reason", p.GetReason())
		add("message", truncate(p.GetMessage(), 200))
	case *eventspb.VolumeCreated:
		add("pv", p.GetRequestName())
		add("volume", p.GetVolumeId())
		add("bucket", p.GetBucketName())
	case *eventspb.VolumeDeleted:
		add("pv", names.PV(p.GetVolumeId()))
		add("volume", p.GetVolumeId())
		add("bucket", p.GetBucketName())
		parts = append(parts, fmt.Sprintf("bucketDeleted=%t", p.GetBucketDeleted()))
	case *eventspb.AttachmentCleaned:
		if p.GetWorkloadPodUid() != "" {
			pod = names.Pod(p.GetWorkloadPodUid())
		}
		add("s3pa", p.GetAttachmentName())
		add("mountpointPod", p.GetMountpointPodName())
		add("reason", p.GetReason())
	}
	return clean(pod), strings.Join(parts, " ")
}

// MentionsPV reports whether d is about the PersistentVolume pv.
func MentionsPV(d *events.Decoded, pv string, names *Names) bool {
	switch p := d.Payload.(type) {
	case *eventspb.WorkloadScheduled:
		for _, v := range p.GetVolumes() {
			if v.GetPvName() == pv {
				return true
			}
		}
		return false
	case interface{ GetPvName() string }:
		if p.GetPvName() != "" {
			return p.GetPvName() == pv
		}
	}
	if v, ok := d.Payload.(interface{ GetVolumeId() string }); ok {
		return names.PV(v.GetVolumeId()) == pv
	}
	return false
}

// clean replaces control characters, so that text from the bus cannot drive the terminal.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar || unicode.In(r, unicode.Bidi_Control) {
			return '?'
		}
		return r
	}, s)
}

// truncate keeps the first n runes of s.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
