// Package metrics holds the node-agent's Prometheus metrics: publish and unpublish outcomes and
// latencies split by phase, events received, fallback re-reads, cleanups and the health of each
// source mount.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

const namespace = "s3csi_node"

// Phases of NodePublishVolume, the values of the "phase" label.
const (
	PhaseWaitAttachment = "wait_attachment"
	PhaseWaitPod        = "wait_pod"
	PhaseMount          = "mount"
	PhaseBind           = "bind"
)

// Metrics owns the node-agent's collectors; build it once with New and inject it. A nil
// *Metrics records nothing.
type Metrics struct {
	rpcs          *prometheus.CounterVec
	rpcDuration   *prometheus.HistogramVec
	phaseDuration *prometheus.HistogramVec
	events        *prometheus.CounterVec
	wakeups       *prometheus.CounterVec
	cleanups      *prometheus.CounterVec
	sourceUp      *prometheus.GaugeVec
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 2.5, 5, 10, 30, 60}
	m := &Metrics{
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "csi_rpcs_total",
			Help: "CSI RPCs served, by method and gRPC status code.",
		}, []string{"method", "code"}),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "csi_rpc_duration_seconds",
			Help: "Latency of CSI RPCs, by method.", Buckets: buckets,
		}, []string{"method"}),
		phaseDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "publish_phase_duration_seconds",
			Help: "Time NodePublishVolume spends in each phase: wait_attachment, wait_pod, mount, bind.", Buckets: buckets,
		}, []string{"phase"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "events_received_total",
			Help: "Events received from the bus, by type.",
		}, []string{"type"}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "attachment_rereads_total",
			Help: "Re-reads of attachments while waiting, by trigger: event or fallback.",
		}, []string{"trigger"}),
		cleanups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "source_cleanups_total",
			Help: "Source mount cleanups, by outcome: unmounted, waiting (binds remain), failed.",
		}, []string{"outcome"}),
		sourceUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "source_up",
			Help: "1 when the FUSE filesystem a Mountpoint Pod serves on this node answers, 0 when it is dead or does not answer; one series per source mount.",
		}, []string{"mountpoint_pod"}),
	}
	reg.MustRegister(m.rpcs, m.rpcDuration, m.phaseDuration, m.events, m.wakeups, m.cleanups, m.sourceUp)
	return m
}

// ObserveRPC records one served CSI RPC. method is the full gRPC method name.
func (m *Metrics) ObserveRPC(method string, code codes.Code, d time.Duration) {
	if m == nil {
		return
	}
	m.rpcs.WithLabelValues(method, code.String()).Inc()
	m.rpcDuration.WithLabelValues(method).Observe(d.Seconds())
}

// Phase records the time one publish spent in phase.
func (m *Metrics) Phase(phase string, d time.Duration) {
	if m == nil {
		return
	}
	m.phaseDuration.WithLabelValues(phase).Observe(d.Seconds())
}

// Event records one received event.
func (m *Metrics) Event(eventType string) {
	if m == nil {
		return
	}
	m.events.WithLabelValues(eventType).Inc()
}

// Wakeup records one re-read of attachments, triggered by an event or by the fallback period.
func (m *Metrics) Wakeup(byEvent bool) {
	if m == nil {
		return
	}
	trigger := "fallback"
	if byEvent {
		trigger = "event"
	}
	m.wakeups.WithLabelValues(trigger).Inc()
}

// Cleanup records one source cleanup attempt.
func (m *Metrics) Cleanup(outcome string) {
	if m == nil {
		return
	}
	m.cleanups.WithLabelValues(outcome).Inc()
}

// SourceUp records whether the source mount of Mountpoint Pod mp answers.
func (m *Metrics) SourceUp(mp string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.sourceUp.WithLabelValues(mp).Set(v)
}

// ForgetSource drops the series of a source mount that is gone.
func (m *Metrics) ForgetSource(mp string) {
	if m == nil {
		return
	}
	m.sourceUp.DeleteLabelValues(mp)
}
