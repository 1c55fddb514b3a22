package audit

import (
	"fmt"
	"sort"
	"time"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mppod"
)

// slowStep is the wait between two steps of a pod's mount path that the diagnosis points out.
const slowStep = 10 * time.Second

// PodTracker follows one workload pod's mount path through the stream, in order: it selects
// the pod's events and those of its Mountpoint Pods, and says at the end what happened and what
// is missing (Diagnose).
//
// Problem: an event names a pod by UID only, except workload.scheduled (and attachment.assigned)
// which also carry namespace/name; a Mountpoint Pod's events do not name the workloads at all.
// Solution: learn as the stream goes: a UID from the events that carry the pod's name, the
// Mountpoint Pods from the events that tie them to one of its UIDs.
// Invariant: an event is selected only if, when it is read, it names a UID or a Mountpoint Pod
// already tied to the pod (or the pod's namespace/name).
type PodTracker struct {
	ref  PodRef
	uids map[string]bool
	mps  map[string]bool

	node      string
	scheduled time.Time
	first     *Record
	pvs       map[string]*pvTrack
	slowest   step
	prev      *Record
}

// pvTrack is what happened to one volume of the pod.
type pvTrack struct {
	mountpointPod string
	assigned      time.Time
	published     time.Time
	tookMs        int64
	unpublished   time.Time
	failed        time.Time
	failure       string
	needsUnmount  time.Time
	cleaned       string
}

// step is the wait between two consecutive records of the pod.
type step struct {
	wait     time.Duration
	from, to string
	fromSeq  uint64
	toSeq    uint64
}

// NewPodTracker tracks ref; uids are UIDs known from elsewhere (the API server).
func NewPodTracker(ref PodRef, uids ...string) *PodTracker {
	t := &PodTracker{ref: ref, uids: map[string]bool{}, mps: map[string]bool{}, pvs: map[string]*pvTrack{}}
	if ref.UID != "" {
		t.uids[ref.UID] = true
	}
	for _, u := range uids {
		if u != "" {
			t.uids[u] = true
		}
	}
	return t
}

// Observe reports whether d is about the tracked pod or its Mountpoint Pods, and learns from it.
func (t *PodTracker) Observe(d *events.Decoded) bool {
	switch p := d.Payload.(type) {
	case *eventspb.WorkloadScheduled:
		if !t.pod(p.GetPodUid(), p.GetPodNamespace(), p.GetPodName()) {
			return false
		}
		t.node = p.GetNode()
		if t.scheduled.IsZero() {
			t.scheduled = d.Event.Time()
		}
		for _, v := range p.GetVolumes() {
			t.pv(v.GetPvName())
		}
	case *eventspb.AttachmentAssigned:
		if !t.pod(p.GetWorkloadPodUid(), p.GetWorkloadNamespace(), p.GetWorkloadName()) {
			return false
		}
		t.node = p.GetNode()
		t.mps[p.GetMountpointPodName()] = true
		v := t.pv(p.GetPvName())
		v.mountpointPod, v.assigned = p.GetMountpointPodName(), d.Event.Time()
	case *eventspb.VolumePublished:
		if !t.uids[p.GetWorkloadPodUid()] {
			return false
		}
		if p.GetMountpointPodName() != "" {
			t.mps[p.GetMountpointPodName()] = true
		}
		v := t.pv(p.GetPvName())
		v.published, v.tookMs, v.failure = d.Event.Time(), p.GetDurationMs(), ""
		if v.mountpointPod == "" {
			v.mountpointPod = p.GetMountpointPodName()
		}
	case *eventspb.VolumeUnpublished:
		if !t.uids[p.GetWorkloadPodUid()] {
			return false
		}
		for _, v := range t.pvs {
			if !v.published.IsZero() && v.unpublished.IsZero() {
				v.unpublished = d.Event.Time()
			}
		}
	case *eventspb.MountFailed:
		if !t.anyUID(p.GetWorkloadPodUids()) && !t.mps[p.GetMountpointPodName()] {
			return false
		}
		v := t.pv(p.GetPvName())
		v.failed = d.Event.Time()
		v.failure = fmt.Sprintf("%s: %s", clean(p.GetReason()), truncate(clean(p.GetMessage()), 200))
	case *eventspb.MountpointNeedsUnmount:
		if !t.mps[p.GetMountpointPodName()] {
			return false
		}
		for _, v := range t.pvs {
			if v.mountpointPod == p.GetMountpointPodName() {
				v.needsUnmount = d.Event.Time()
			}
		}
	case *eventspb.AttachmentCleaned:
		if !t.uids[p.GetWorkloadPodUid()] && !t.mps[p.GetMountpointPodName()] {
			return false
		}
		for _, v := range t.pvs {
			if v.mountpointPod == p.GetMountpointPodName() || p.GetMountpointPodName() == "" {
				v.cleaned = clean(p.GetReason())
			}
		}
	default:
		return false
	}
	return true
}

// Note sets r.SincePrevious from the previous record of the pod, and remembers the longest wait.
func (t *PodTracker) Note(r *Record) {
	if t.first == nil {
		first := *r
		t.first = &first
	}
	if t.prev != nil {
		r.SincePrevious = r.Stored.Sub(t.prev.Stored)
		if r.SincePrevious > t.slowest.wait {
			t.slowest = step{wait: r.SincePrevious, from: t.prev.Type, to: r.Type, fromSeq: t.prev.Seq, toSeq: r.Seq}
		}
	}
	prev := *r
	t.prev = &prev
}

func (t *PodTracker) pod(uid, namespace, name string) bool {
	if t.uids[uid] {
		return true
	}
	if t.ref.Name != "" && name == t.ref.Name && namespace == t.ref.Namespace {
		t.uids[uid] = true
		return true
	}
	return false
}

func (t *PodTracker) anyUID(uids []string) bool {
	for _, u := range uids {
		if t.uids[u] {
			return true
		}
	}
	return false
}

func (t *PodTracker) pv(name string) *pvTrack {
	if name == "" {
		name = "(unknown PV)"
	}
	v, ok := t.pvs[name]
	if !ok {
		v = &pvTrack{}
		t.pvs[name] = v
	}
	return v
}

// Diagnose says, in a few lines, how far the pod's mount path got and what to look at next;
// now is the time the waits are measured to, mountpointNamespace where Mountpoint Pods run.
func (t *PodTracker) Diagnose(now time.Time, mountpointNamespace string) []string {
	if mountpointNamespace == "" {
		mountpointNamespace = mppod.DefaultNamespace
	}
	if t.first == nil {
		return []string{fmt.Sprintf("No event about pod %s in the selected range. If it uses an s3csi volume and is "+
			"scheduled, the pod-reconciler has not handled it: read the pod-reconciler's logs, "+
			"or widen the range (--since, --from-seq).", t.ref)}
	}
	var out []string
	where := ""
	if t.node != "" {
		where = " on node " + t.node
	}
	if t.scheduled.IsZero() {
		out = append(out, fmt.Sprintf("Pod %s: its workload.scheduled event is not in the selected range.", t.ref))
	} else {
		out = append(out, fmt.Sprintf("Pod %s: scheduled%s at %s.", t.ref, where, stamp(t.scheduled)))
	}
	names := make([]string, 0, len(t.pvs))
	for name := range t.pvs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		out = append(out, t.pvLine(name, t.pvs[name], now, mountpointNamespace))
		if v := t.pvs[name]; !v.needsUnmount.IsZero() && !v.published.IsZero() && v.unpublished.IsZero() {
			out = append(out, fmt.Sprintf("  %s: its Mountpoint Pod %s was asked to unmount at %s while the volume was "+
				"still published to the pod.", name, v.mountpointPod, stamp(v.needsUnmount)))
		}
		if v := t.pvs[name]; v.cleaned != "" {
			out = append(out, fmt.Sprintf("  %s: the janitor cleaned up after it (%s).", name, v.cleaned))
		}
	}
	if t.slowest.wait >= slowStep {
		out = append(out, fmt.Sprintf("Longest wait: %s between %s (seq %d) and %s (seq %d).",
			t.slowest.wait.Round(time.Millisecond), t.slowest.from, t.slowest.fromSeq, t.slowest.to, t.slowest.toSeq))
	}
	return out
}

func (t *PodTracker) pvLine(name string, v *pvTrack, now time.Time, ns string) string {
	mp := v.mountpointPod
	switch {
	case !v.unpublished.IsZero() && !v.published.IsZero():
		return fmt.Sprintf("  %s: mounted at %s, unpublished at %s.", name, stamp(v.published), stamp(v.unpublished))
	case !v.published.IsZero() && v.failed.After(v.published):
		return fmt.Sprintf("  %s: mounted at %s, then the mount failed at %s (%s): read the logs of pod %s/%s.",
			name, stamp(v.published), stamp(v.failed), v.failure, ns, mp)
	case !v.published.IsZero():
		line := fmt.Sprintf("  %s: mounted at %s through Mountpoint Pod %s (NodePublishVolume took %s",
			name, stamp(v.published), mp, time.Duration(v.tookMs)*time.Millisecond)
		if !t.scheduled.IsZero() {
			line += fmt.Sprintf(", %s after scheduling", v.published.Sub(t.scheduled).Round(time.Millisecond))
		}
		return line + ")."
	case !v.failed.IsZero():
		return fmt.Sprintf("  %s: NOT MOUNTED: the mount failed at %s (%s): read the logs of pod %s/%s and of the node-agent%s.",
			name, stamp(v.failed), v.failure, ns, mp, t.onNode())
	case !v.assigned.IsZero():
		return fmt.Sprintf("  %s: NOT MOUNTED: assigned to Mountpoint Pod %s at %s, and no volume.published for %s since: "+
			"check `kubectl -n %s get pod %s` and the node-agent's logs%s (kubelet calls NodePublishVolume once the pod's volumes are attached).",
			name, mp, stamp(v.assigned), since(now, v.assigned), ns, mp, t.onNode())
	case !t.scheduled.IsZero():
		return fmt.Sprintf("  %s: NOT MOUNTED: no attachment.assigned in the %s since scheduling: read the pod-reconciler's logs "+
			"and check the MountpointS3PodAttachments (`kubectl get s3pa`).", name, since(now, t.scheduled))
	}
	return fmt.Sprintf("  %s: no step of its mount path is in the selected range.", name)
}

func (t *PodTracker) onNode() string {
	if t.node == "" {
		return ""
	}
	return " on node " + t.node
}

func stamp(ts time.Time) string { return ts.UTC().Format(time.RFC3339) }

func since(now, ts time.Time) string {
	d := now.Sub(ts)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}
