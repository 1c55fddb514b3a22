package events_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/go-logr/logr/testr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

var unmountType = string(events.TypeMountpointNeedsUnmount)

func outboxEvent(t *testing.T, id string) event.Event {
	t.Helper()
	e, err := events.New("/test", id, &eventspb.MountpointNeedsUnmount{Node: "node-a", MountpointPodName: mppod.Name(id, "pv")})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func outboxMetrics(t *testing.T) *events.OutboxMetrics {
	t.Helper()
	m, err := events.NewOutboxMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// runOutbox starts o and returns the function that stops it and waits for it.
func runOutbox(o *events.Outbox) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = o.Start(ctx)
		close(done)
	}()
	return func() {
		cancel()
		<-done
	}
}

func TestOutboxPublishesToTheStreamAndSurvivesANATSOutage(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc, err := events.Connect(t.Context(), srv.URL(), "test", testr.New(t), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := outboxMetrics(t)
	prepared := 0
	o := events.NewOutbox(events.NewPublisher(js, events.PublisherOptions{AttemptTimeout: 200 * time.Millisecond}), events.OutboxOptions{
		Prepare: func(ctx context.Context) error {
			prepared++
			_, err := events.EnsureStream(ctx, js, events.StreamConfig{})
			return err
		},
		Metrics: m,
		Log:     testr.New(t),
	})
	stop := runOutbox(o)
	defer stop()

	published := func(n float64) func() bool {
		return func() bool { return m.Count(unmountType, "published") == n }
	}
	if !o.Enqueue(outboxEvent(t, "one")) {
		t.Fatal("Enqueue refused an event")
	}
	eventually(t, 20*time.Second, "the first event is published", published(1))
	if o.Enqueue(outboxEvent(t, "one")) {
		t.Error("an acknowledged event was queued again")
	}

	srv.Stop()
	start := time.Now()
	for _, id := range []string{"two", "three"} {
		if !o.Enqueue(outboxEvent(t, id)) {
			t.Fatalf("Enqueue(%s) refused while NATS is down", id)
		}
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Enqueue blocked for %s while NATS is down", d)
	}
	time.Sleep(300 * time.Millisecond)
	srv.Restart(t)
	eventually(t, 20*time.Second, "the events queued during the outage are published", published(3))
	if prepared != 1 {
		t.Errorf("stream prepared %d times, want once", prepared)
	}
}

// blockedSink never acknowledges until its context ends.
type blockedSink struct{}

func (blockedSink) Publish(ctx context.Context, _ event.Event) (*jetstream.PubAck, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestFullOutboxDropsAndCounts(t *testing.T) {
	m := outboxMetrics(t)
	o := events.NewOutbox(blockedSink{}, events.OutboxOptions{Size: 2, Workers: 1, Metrics: m, Log: testr.New(t)})
	for _, id := range []string{"a", "b"} {
		if !o.Enqueue(outboxEvent(t, id)) {
			t.Fatalf("Enqueue(%s) refused below the size", id)
		}
	}
	if o.Enqueue(outboxEvent(t, "c")) {
		t.Error("Enqueue accepted an event beyond the size")
	}
	if got := m.Count(unmountType, "dropped"); got != 1 {
		t.Errorf("dropped = %v, want 1", got)
	}
	runOutbox(o)()
}

// failingSink fails every publish permanently.
type failingSink struct{}

func (failingSink) Publish(context.Context, event.Event) (*jetstream.PubAck, error) {
	return nil, errors.New("refused")
}

func TestOutboxCountsFailedPublishes(t *testing.T) {
	m := outboxMetrics(t)
	o := events.NewOutbox(failingSink{}, events.OutboxOptions{Metrics: m})
	stop := runOutbox(o)
	defer stop()
	o.Enqueue(outboxEvent(t, "x"))
	eventually(t, 20*time.Second, "the failure is counted", func() bool { return m.Count(unmountType, "failed") == 1 })
}

func TestOutboxWithoutNATSDiscards(t *testing.T) {
	o, closeFn, err := events.OpenOutbox(t.Context(), "", "test", events.OutboxOptions{Metrics: outboxMetrics(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if o.Enqueue(outboxEvent(t, "x")) {
		t.Error("an outbox without NATS accepted an event")
	}
}

func TestOpenOutboxCreatesTheStreamOnFirstPublish(t *testing.T) {
	srv := testenv.StartNATS(t)
	m := outboxMetrics(t)
	o, closeFn, err := events.OpenOutbox(t.Context(), srv.URL(), "test", events.OutboxOptions{Metrics: m, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	stop := runOutbox(o)
	defer stop()
	o.Enqueue(outboxEvent(t, "first"))
	eventually(t, 20*time.Second, "the event is published", func() bool { return m.Count(unmountType, "published") == 1 })
}

func TestOutboxNotifyBuildsAndCountsBadPayloads(t *testing.T) {
	m := outboxMetrics(t)
	sink := &recordingSink{}
	o := events.NewOutbox(sink, events.OutboxOptions{Source: "/s3csi/test", Metrics: m, Workers: 1})
	stop := runOutbox(o)
	defer stop()
	o.Notify("good", &eventspb.MountpointNeedsUnmount{Node: "node-a", MountpointPodName: mpName})
	o.Notify("bad", &eventspb.MountpointNeedsUnmount{Node: "node-a"}) // no Mountpoint Pod name
	eventually(t, 20*time.Second, "the good event is published", func() bool { return m.Count(unmountType, "published") == 1 })
	if got := m.Count(unmountType, "failed"); got != 1 {
		t.Errorf("failed = %v, want 1 for the payload missing a required field", got)
	}
	if src := sink.last().Source(); src != "/s3csi/test" {
		t.Errorf("source = %q, want /s3csi/test", src)
	}
}

// recordingSink acknowledges every event and keeps the last one.
type recordingSink struct {
	mu sync.Mutex
	e  event.Event
}

func (s *recordingSink) Publish(_ context.Context, e event.Event) (*jetstream.PubAck, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.e = e
	return &jetstream.PubAck{Stream: events.StreamName}, nil
}

func (s *recordingSink) last() event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e
}

// A NATS without persistence that restarts comes back without the stream: the outbox creates it
// again, and the event that found it gone is stored.
func TestOutboxCreatesTheStreamAgainWhenItIsGone(t *testing.T) {
	srv := testenv.StartNATS(t)
	m := outboxMetrics(t)
	o, closeFn, err := events.OpenOutbox(t.Context(), srv.URL(), "test", events.OutboxOptions{Metrics: m, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	stop := runOutbox(o)
	defer stop()
	o.Enqueue(outboxEvent(t, "before"))
	eventually(t, 20*time.Second, "the first event is published", func() bool { return m.Count(unmountType, "published") == 1 })

	js := jetStreamOf(t, srv.URL())
	if err := js.DeleteStream(t.Context(), events.StreamName); err != nil {
		t.Fatal(err)
	}
	o.Enqueue(outboxEvent(t, "after"))
	eventually(t, 20*time.Second, "the event after the loss is published", func() bool { return m.Count(unmountType, "published") == 2 })
	info, err := js.Stream(t.Context(), events.StreamName)
	if err != nil {
		t.Fatalf("the stream was not created again: %v", err)
	}
	if n := info.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("the new stream holds %d messages, want the event published after the loss", n)
	}
}

// jetStreamOf connects a JetStream client to url for the test.
func jetStreamOf(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
