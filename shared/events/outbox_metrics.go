package events

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

const (
	outcomePublished = "published"
	outcomeFailed    = "failed"
	outcomeDropped   = "dropped"
)

// OutboxMetrics counts what happened to the events a service published, by type and outcome
// (published: acknowledged by the stream; failed: given up after retries; dropped: the queue
// was full). The names are the same in every service; the service is the scrape target.
type OutboxMetrics struct {
	events *prometheus.CounterVec
	queue  prometheus.Gauge
}

// NewOutboxMetrics creates the metrics and registers them on reg.
func NewOutboxMetrics(reg prometheus.Registerer) (*OutboxMetrics, error) {
	m := &OutboxMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "s3csi_events_total",
			Help: "Events this service tried to publish, by type and outcome (published, failed, dropped).",
		}, []string{"type", "outcome"}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "s3csi_event_queue_length",
			Help: "Events waiting to be published.",
		}),
	}
	for _, c := range []prometheus.Collector{m.events, m.queue} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register event metrics: %w", err)
		}
	}
	return m, nil
}

// Count returns how many events of a type had an outcome, for tests and health checks.
func (m *OutboxMetrics) Count(eventType, outcome string) float64 {
	if m == nil {
		return 0
	}
	c, err := m.events.GetMetricWithLabelValues(eventType, outcome)
	if err != nil {
		return 0
	}
	return readCounter(c)
}

func (m *OutboxMetrics) observe(eventType, outcome string) {
	if m != nil {
		m.events.WithLabelValues(eventType, outcome).Inc()
	}
}

func (m *OutboxMetrics) queued() {
	if m != nil {
		m.queue.Inc()
	}
}

func (m *OutboxMetrics) dequeued() {
	if m != nil {
		m.queue.Dec()
	}
}

func readCounter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
