// Package health watches the node's source mounts and reports a dead FUSE connection (the
// Mountpoint Pod's filesystem crashed, was OOM-killed or evicted) or one that stopped answering
// (a stopped or stuck server): a mount.failed event, and a Warning Event on every workload pod
// that uses it, telling the operator what to do. It also keeps the s3csi_node_source_up metric.
package health

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/node-agent/internal/metrics"
	"github.com/s3csi/s3csi/services/node-agent/internal/source"
)

// DefaultPeriod is how often sources are checked: a dead mount is reported within it.
const DefaultPeriod = 5 * time.Second

// Reasons of the Warning Events and of the mount.failed events: the connection is dead, or the
// server does not answer.
const (
	Reason              = "MountpointConnectionLost"
	ReasonNotResponding = "MountpointNotResponding"
	// ReasonReplaced: the mounter died and the next one took the mount over (handshake.Kept).
	ReasonReplaced = "MountpointReplaced"
	// ReasonHandedOver (a Normal Event): the mounter of a Mountpoint Pod that was going handed
	// the mount over, and the mounter of the pod that replaced it took it over.
	ReasonHandedOver = "MountpointHandedOver"
)

// EventSink publishes an audit event after the fact it describes, never blocking nor failing;
// *events.Outbox is one.
type EventSink interface {
	Notify(id string, payload proto.Message)
}

// Monitor is a runnable that checks every source mount each period.
type Monitor struct {
	kubeletDir, node, namespace string
	period                      time.Duration
	api                         client.Client
	sink                        EventSink
	metrics                     *metrics.Metrics

	// mu guards reported: Check and Report (called by NodePublishVolume) both report.
	mu sync.Mutex
	// reported holds, per Mountpoint Pod, the reason already reported for its current incident.
	reported map[string]string
	// hung counts, per source, the consecutive checks that found it not answering.
	hung map[string]int
	// known are the sources of the last check, whose metric series a later check drops once
	// they are gone. Only Check touches hung and known.
	known map[string]bool
}

// New returns a Monitor; api must read the API server directly. sink and m may be nil.
func New(kubeletDir, node, namespace string, period time.Duration, api client.Client, sink EventSink, m *metrics.Metrics) *Monitor {
	if period <= 0 {
		period = DefaultPeriod
	}
	return &Monitor{kubeletDir: kubeletDir, node: node, namespace: namespace, period: period, api: api, sink: sink,
		metrics: m, reported: map[string]string{}, hung: map[string]int{}}
}

// Start checks every period until ctx ends.
func (m *Monitor) Start(ctx context.Context) error {
	ticker := time.NewTicker(m.period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			m.Check(ctx)
		}
	}
}

// Check looks at every source once, reports each newly dead one and each one that did not
// answer two checks in a row, and returns the state of each source by Mountpoint Pod name.
//
// Problem: the stat of a source whose FUSE server is stopped never returns; one such source
// would stop the checks of every other source.
// Solution: every stat is bounded (mount.Check); a source that does not answer is logged once
// per incident and the next sources are checked. A probe still blocked from an earlier check
// makes the next check of that source return at once (mount.Stat), so a stopped server costs
// one timeout per incident, not one per period. It is reported on its workloads only when the
// next check finds it still silent: a server silent for a whole period is stopped or stuck, not
// slow.
// Invariant: Check returns within ProbeTimeout per newly stopped server plus the reports.
func (m *Monitor) Check(ctx context.Context) map[string]mount.State {
	log := logr.FromContextOrDiscard(ctx)
	names, err := mppod.SourceNames(m.kubeletDir)
	if err != nil {
		log.Error(err, "Checking sources failed")
		return nil
	}
	seen := map[string]bool{}
	states := make(map[string]mount.State, len(names))
	for _, name := range names {
		seen[name] = true
		source, err := mppod.SourceDir(m.kubeletDir, name)
		if err != nil {
			continue // SourceNames lists valid names only
		}
		state, _, err := mount.Check(source)
		if err != nil {
			continue
		}
		states[name] = state
		switch state {
		case mount.Hung:
			m.metrics.SourceUp(name, false)
			if m.hung[name] == 0 {
				log.Info("A Mountpoint Pod's filesystem does not answer (stopped or stuck)", "mountpointPod", name)
			}
			m.hung[name]++
			if m.hung[name] >= 2 {
				m.report(ctx, name, "", ReasonNotResponding)
			}
			continue
		case mount.Corrupted:
			delete(m.hung, name)
			m.metrics.SourceUp(name, false)
			m.Report(ctx, name, "")
			continue
		case mount.Mounted:
			m.metrics.SourceUp(name, true)
		default:
			m.metrics.ForgetSource(name)
		}
		delete(m.hung, name)
		m.mu.Lock()
		delete(m.reported, name)
		m.mu.Unlock()
	}
	m.mu.Lock()
	for name := range m.reported {
		if !seen[name] {
			delete(m.reported, name)
		}
	}
	m.mu.Unlock()
	for name := range m.hung {
		if !seen[name] {
			delete(m.hung, name)
		}
	}
	for name := range m.known {
		if !seen[name] {
			m.metrics.ForgetSource(name)
		}
	}
	m.known = seen
	return states
}

// Report reports the dead filesystem of Mountpoint Pod mp, once per incident, on each of its
// workloads but exceptPodUID; a failed report is logged and retried by the next Check.
//
// Problem: NodePublishVolume mounts a dead source again as soon as kubelet asks (a republish,
// or a new workload), often before the next Check, which then finds it live and reports
// nothing, while the workloads that used the dead mount keep seeing "transport endpoint is not
// connected" (their containers hold the old mount).
// Solution: the publish that finds the source dead calls Report before mounting it again; the
// workload it publishes for the first time is excepted (it gets the new mount).
func (m *Monitor) Report(ctx context.Context, mp, exceptPodUID string) {
	m.report(ctx, mp, exceptPodUID, Reason)
}

// Replaced reports on each workload of Mountpoint Pod mp that its mounter ended, and how, and that
// the next one took the mount over r.Pause later: the workload saw a pause, and, when the mounter
// died rather than handed the mount over, lost a file it was writing then. Each replacement is
// reported; a failed report is logged.
func (m *Monitor) Replaced(ctx context.Context, mp string, r handshake.Resumption) {
	reason := ReasonReplaced
	if r.HandedOver {
		reason = ReasonHandedOver
	}
	if err := m.publish(ctx, mp, "", reason, r.Pause); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "Reporting a replaced mounter failed", "mountpointPod", mp)
	}
}

// report reports reason on mp's workloads unless this incident already was.
func (m *Monitor) report(ctx context.Context, mp, exceptPodUID, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reported[mp] == reason {
		return
	}
	if err := m.publish(ctx, mp, exceptPodUID, reason, 0); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "Reporting a broken mount failed; retrying", "mountpointPod", mp, "reason", reason)
		return
	}
	m.reported[mp] = reason
}

// publish publishes a Warning Event on each workload of the Mountpoint Pod, and mount.failed when
// the mount broke; pause is the time a replaced mounter's mount waited.
func (m *Monitor) publish(ctx context.Context, mp, exceptPodUID, reason string, pause time.Duration) error {
	var s3pas s3csiv2.MountpointS3PodAttachmentList
	if err := m.api.List(ctx, &s3pas, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector(s3csiv2.FieldNodeName, m.node)}); err != nil {
		return fmt.Errorf("list attachments: %w", err)
	}
	uids := map[string]bool{}
	var volumeID, pvName string
	for _, a := range s3pas.Items {
		for _, w := range a.Spec.MountpointS3PodAttachments[mp] {
			if w.WorkloadPodUID == exceptPodUID {
				continue
			}
			uids[w.WorkloadPodUID] = true
			volumeID, pvName = a.Spec.VolumeID, a.Spec.PersistentVolumeName
		}
	}
	var msg string
	switch reason {
	case ReasonNotResponding:
		msg = source.HungMessage(m.namespace, mp)
		logr.FromContextOrDiscard(ctx).Info("A Mountpoint Pod's filesystem still does not answer", "mountpointPod", mp, "workloads", len(uids))
	case ReasonReplaced:
		msg = fmt.Sprintf("The mounter of Mountpoint Pod %s/%s ended%s; the mounter kubelet started next took the mount over "+
			"%s later: reads and listings went on after the pause, and a file being written through the mount then "+
			"fails with ESTALE (stale file handle) and must be written again", m.namespace, mp, m.awaitExitCause(ctx, mp), pause.Round(time.Millisecond))
		logr.FromContextOrDiscard(ctx).Info("A Mountpoint Pod's mounter was replaced under its workloads", "mountpointPod", mp, "workloads", len(uids))
	case ReasonHandedOver:
		msg = fmt.Sprintf("Mountpoint Pod %s/%s was stopped (its pod was deleted, evicted or upgraded) and handed its mount "+
			"over; the Mountpoint Pod that replaces it took the mount over %s later: reads, writes and listings went on "+
			"after the pause, without an error", m.namespace, mp, pause.Round(time.Millisecond))
		logr.FromContextOrDiscard(ctx).Info("A Mountpoint Pod handed its mount over to the pod that replaces it", "mountpointPod", mp, "workloads", len(uids))
	default:
		msg = source.DeadMessage(m.namespace, mp, m.awaitExitCause(ctx, mp))
		logr.FromContextOrDiscard(ctx).Info("A Mountpoint Pod's filesystem is dead", "mountpointPod", mp, "workloads", len(uids))
	}
	var pods corev1.PodList
	if err := m.api.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", m.node)}); err != nil {
		return fmt.Errorf("list pods of node: %w", err)
	}
	var affected []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if !uids[string(p.UID)] {
			continue
		}
		affected = append(affected, string(p.UID))
		kind := corev1.EventTypeWarning
		if reason == ReasonHandedOver {
			kind = corev1.EventTypeNormal
		}
		if err := m.api.Create(ctx, event(p, m.node, kind, reason, msg)); err != nil {
			return fmt.Errorf("create event for pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	if m.sink != nil && reason != ReasonReplaced && reason != ReasonHandedOver {
		m.sink.Notify("", &eventspb.MountFailed{Node: m.node, VolumeId: orUnknown(volumeID), PvName: pvName,
			MountpointPodName: mp, WorkloadPodUids: affected, Reason: reason, Message: msg})
	}
	return nil
}

// causeWait bounds how long a report waits for kubelet to record how a mounter ended, and
// causePoll is the pause between two looks.
const causeWait, causePoll = 5 * time.Second, 250 * time.Millisecond

// awaitExitCause is exitCause once kubelet has recorded the end, or empty after causeWait.
//
// Problem: the node-agent can find a connection dead before kubelet notices its container ended
// (kubelet relists once a second), and a report without the cause hides an OOM kill.
// Solution: wait up to causeWait for the pod status to say how the mounter ended.
// Invariant: the report is written within causeWait of the check, with or without a cause.
func (m *Monitor) awaitExitCause(ctx context.Context, mp string) string {
	deadline := time.Now().Add(causeWait)
	for {
		cause := m.exitCause(ctx, mp)
		if cause != "" || !time.Now().Before(deadline) {
			return cause
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(causePoll):
		}
	}
}

// exitCause says how the Mountpoint Pod's mounter ended, when its pod status already tells
// (kubelet records it within a second or so): ": the mounter was OOM-killed", ": the mounter
// exited with code 137". It is empty when the status says nothing yet.
func (m *Monitor) exitCause(ctx context.Context, mp string) string {
	var pod corev1.Pod
	if err := m.api.Get(ctx, client.ObjectKey{Namespace: m.namespace, Name: mp}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return ": its pod was deleted"
		}
		return ""
	}
	if pod.Status.Reason == "Evicted" {
		return ": its pod was evicted (" + pod.Status.Message + ")"
	}
	for _, c := range pod.Status.ContainerStatuses {
		t := c.State.Terminated
		if t == nil {
			t = c.LastTerminationState.Terminated
		}
		switch {
		case t == nil:
		case t.Reason == "OOMKilled":
			return ": the mounter was OOM-killed (memory limit reached)"
		case t.Signal != 0:
			return fmt.Sprintf(": the mounter was killed by signal %d", t.Signal)
		default:
			return fmt.Sprintf(": the mounter exited with code %d", t.ExitCode)
		}
	}
	return ""
}

// WarnWorkload records a Warning Event with reason and msg on the workload pod named pod, of
// UID uid (csi.Config.WarnWorkload: the mount options of its volume that s3csi ignores). A
// failure is logged, not returned: a warning never fails the publish that gives it.
func (m *Monitor) WarnWorkload(ctx context.Context, pod types.NamespacedName, uid types.UID, reason, msg string) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: uid}}
	if err := m.api.Create(ctx, event(p, m.node, corev1.EventTypeWarning, reason, msg)); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "Recording a Warning Event on the workload failed", "pod", pod.String(), "reason", reason)
	}
}

func event(p *corev1.Pod, node, kind, reason, msg string) *corev1.Event {
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + ".", Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace,
			Name: p.Name, UID: p.UID},
		Type: kind, Reason: reason, Message: msg,
		Source:         corev1.EventSource{Component: "s3csi-node-agent", Host: node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
