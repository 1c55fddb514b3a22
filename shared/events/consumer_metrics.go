package events

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// ConsumerMetrics exports how far behind the stream each durable consumer of a service is: the
// events matching its filter that it has not been delivered yet. A consumer that falls behind (a
// slow handler, a burst of events) shows it here, while the stream keeps the backlog.
type ConsumerMetrics struct {
	pending *prometheus.GaugeVec
}

// NewConsumerMetrics creates the metrics and registers them on reg.
func NewConsumerMetrics(reg prometheus.Registerer) (*ConsumerMetrics, error) {
	m := &ConsumerMetrics{pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "s3csi_events_consumer_pending",
		Help: "Events matching the durable consumer's filter not yet delivered to it (its lag), as of its last delivery.",
	}, []string{"consumer"})}
	if err := reg.Register(m.pending); err != nil {
		return nil, fmt.Errorf("register consumer metrics: %w", err)
	}
	return m, nil
}

// Pending returns the last lag recorded for the durable consumer, for tests and health checks.
func (m *ConsumerMetrics) Pending(durable string) float64 {
	if m == nil {
		return 0
	}
	g, err := m.pending.GetMetricWithLabelValues(durable)
	if err != nil {
		return 0
	}
	var out dto.Metric
	if err := g.Write(&out); err != nil {
		return 0
	}
	return out.GetGauge().GetValue()
}

func (m *ConsumerMetrics) observe(durable string, pending uint64) {
	if m != nil {
		m.pending.WithLabelValues(durable).Set(float64(pending))
	}
}
