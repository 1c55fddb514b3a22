package cleanup

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Kinds of removed objects, the "kind" label of the removed-objects metric.
const (
	KindWorkload      = "workload"
	KindAttachment    = "attachment"
	KindMountpointPod = "mountpointpod"
)

// Metrics are the janitor's Prometheus metrics. They are owned here and registered on the
// service's registry by NewMetrics, so tests get a fresh set each.
type Metrics struct {
	Sweeps          *prometheus.CounterVec
	SweepDuration   prometheus.Histogram
	Removed         *prometheus.CounterVec
	UnmountRequests prometheus.Counter
	Errors          *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "s3csi_janitor_sweeps_total",
			Help: "Full sweeps run, by result (success, error).",
		}, []string{"result"}),
		SweepDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "s3csi_janitor_sweep_duration_seconds",
			Help:    "Duration of a full sweep, including the removals it made.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5 ms .. ~41 s
		}),
		Removed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "s3csi_janitor_removed_total",
			Help: "Objects removed, by kind (workload, attachment, mountpointpod) and reason.",
		}, []string{"kind", "reason"}),
		UnmountRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "s3csi_janitor_unmount_requests_total",
			Help: "Mountpoint Pods annotated needs-unmount by the janitor.",
		}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "s3csi_janitor_errors_total",
			Help: "Failed checks, by what was being checked (node, mountpointpod, sweep).",
		}, []string{"check"}),
	}
	reg.MustRegister(m.Sweeps, m.SweepDuration, m.Removed, m.UnmountRequests, m.Errors)
	return m
}
