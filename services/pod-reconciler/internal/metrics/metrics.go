// Package metrics holds the pod-reconciler's Prometheus metrics. One Metrics value owns them
// and is registered on the service's admin registry; components receive it, never a global.
package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "s3csi_pod_reconciler"

// Results of a reconcile, the "result" label of ReconcilesTotal.
const (
	ResultSuccess = "success"
	ResultRequeue = "requeue"
	ResultError   = "error"
)

// Metrics are the pod-reconciler's own metrics. controller-runtime's (workqueue, reconcile
// time, client requests) are served next to them on the same /metrics.
type Metrics struct {
	// ReconcilesTotal counts reconciles by controller (workload, attachment, mountpoint) and result.
	ReconcilesTotal *prometheus.CounterVec
	// ReconcileErrorsTotal counts reconciles that returned an error, by controller.
	ReconcileErrorsTotal *prometheus.CounterVec
	// AttachmentsCreatedTotal and AttachmentsDeletedTotal count MountpointS3PodAttachment writes.
	AttachmentsCreatedTotal prometheus.Counter
	AttachmentsDeletedTotal prometheus.Counter
	// WorkloadsAssignedTotal counts workloads recorded in an attachment.
	WorkloadsAssignedTotal prometheus.Counter
	// MountpointPodsCreatedTotal and MountpointPodsDeletedTotal count Mountpoint Pod writes;
	// MountpointPodsReplacedTotal the failed ones replaced while workloads needed them.
	MountpointPodsCreatedTotal  prometheus.Counter
	MountpointPodsDeletedTotal  prometheus.Counter
	MountpointPodsReplacedTotal prometheus.Counter
	// ScheduledToAssigned is the time from a workload's PodScheduled condition to its
	// attachment being written (the condition has one-second resolution).
	ScheduledToAssigned prometheus.Histogram
}

// New creates the metrics and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help})
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		ReconcilesTotal:         counterVec("reconciles_total", "Reconciles by controller and result.", "controller", "result"),
		ReconcileErrorsTotal:    counterVec("reconcile_errors_total", "Reconciles that failed, by controller.", "controller"),
		AttachmentsCreatedTotal: counter("attachments_created_total", "MountpointS3PodAttachments created."),
		AttachmentsDeletedTotal: counter("attachments_deleted_total", "MountpointS3PodAttachments deleted."),
		WorkloadsAssignedTotal:  counter("workloads_assigned_total", "Workloads recorded in a MountpointS3PodAttachment."),
		MountpointPodsCreatedTotal: counter("mountpoint_pods_created_total",
			"Mountpoint Pods created."),
		MountpointPodsDeletedTotal: counter("mountpoint_pods_deleted_total",
			"Mountpoint Pods deleted (succeeded, failed or replaced)."),
		MountpointPodsReplacedTotal: counter("mountpoint_pods_replaced_total",
			"Failed or evicted Mountpoint Pods replaced while workloads needed them."),
		ScheduledToAssigned: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "scheduled_to_assigned_seconds",
			Help:    "Time from a workload's PodScheduled condition to its attachment being written.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120},
		}),
	}
	for _, c := range []prometheus.Collector{
		m.ReconcilesTotal, m.ReconcileErrorsTotal, m.AttachmentsCreatedTotal, m.AttachmentsDeletedTotal,
		m.WorkloadsAssignedTotal, m.MountpointPodsCreatedTotal, m.MountpointPodsDeletedTotal,
		m.MountpointPodsReplacedTotal, m.ScheduledToAssigned,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register pod-reconciler metrics: %w", err)
		}
	}
	return m, nil
}
