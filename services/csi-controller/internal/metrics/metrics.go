// Package metrics holds the csi-controller's Prometheus metrics: CSI RPCs by method and code,
// S3 calls by operation and outcome, and event publications.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

const namespace = "s3csi_controller"

// Outcomes of an S3 call or an event publication, the values of the "outcome" label. They are
// few on purpose: a label per S3 error code would let a misbehaving endpoint grow the series
// without bound.
const (
	OutcomeSuccess     = "success"
	OutcomeNotFound    = "not_found"
	OutcomeAuth        = "unauthenticated"
	OutcomeDenied      = "permission_denied"
	OutcomeConflict    = "conflict"
	OutcomeTimeout     = "timeout"
	OutcomeUnreachable = "unreachable"
	OutcomeError       = "error"
)

// Metrics owns the csi-controller's collectors; build it once with New and inject it.
type Metrics struct {
	rpcs        *prometheus.CounterVec
	rpcDuration *prometheus.HistogramVec
	s3Calls     *prometheus.CounterVec
	s3Duration  *prometheus.HistogramVec
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "csi_rpcs_total",
			Help: "CSI RPCs served, by method and gRPC status code.",
		}, []string{"method", "code"}),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "csi_rpc_duration_seconds",
			Help:    "Latency of CSI RPCs, by method.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"method"}),
		s3Calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "s3_requests_total",
			Help: "S3 calls made, by operation and outcome.",
		}, []string{"operation", "outcome"}),
		s3Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "s3_request_duration_seconds",
			Help:    "Latency of S3 calls, by operation.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"operation"}),
	}
	reg.MustRegister(m.rpcs, m.rpcDuration, m.s3Calls, m.s3Duration)
	return m
}

// ObserveRPC records one CSI RPC. method is the full gRPC method name.
func (m *Metrics) ObserveRPC(method string, code codes.Code, d time.Duration) {
	m.rpcs.WithLabelValues(method, code.String()).Inc()
	m.rpcDuration.WithLabelValues(method).Observe(d.Seconds())
}

// ObserveS3 records one S3 call; outcome is one of the Outcome* constants.
func (m *Metrics) ObserveS3(operation, outcome string, d time.Duration) {
	m.s3Calls.WithLabelValues(operation, outcome).Inc()
	m.s3Duration.WithLabelValues(operation).Observe(d.Seconds())
}
