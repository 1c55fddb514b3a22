package events_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
)

func TestConsumerReceivesItsNodesEvents(t *testing.T) {
	b := newBus(t)
	const node = "node-a.example.com" // dotted: must still be one subject token
	want := map[string]int{}
	for _, typ := range events.Types() {
		e := mustNew(t, payload(typ, node))
		b.publish(t, e)
		want[e.ID()] = 1 // node-a's, or cluster-scoped
		if typ.NodeScoped() {
			b.publish(t, mustNew(t, payload(typ, "node-b.example.com"))) // not for node-a
		}
	}

	rec := newRecorder(nil)
	b.consume(t, events.ConsumerConfig{Durable: "node-a", FilterSubjects: events.NodeSubjects(node)}, rec.handle)
	eventually(t, 10*time.Second, "the consumer handled its 9 events", func() bool { return rec.total() >= len(want) })
	time.Sleep(200 * time.Millisecond) // room for an unexpected extra delivery
	if got, _ := rec.snapshot(); !maps.Equal(got, want) {
		t.Errorf("handled %v, want each of %v once", got, want)
	}
	eventually(t, 5*time.Second, "every event is acknowledged", func() bool {
		info := b.consumerInfo(t, "node-a")
		return info.NumAckPending == 0 && info.NumPending == 0
	})
}

func TestRetriedPublishIsDeduplicated(t *testing.T) {
	b := newBus(t)
	id := events.DeterministicID(events.TypeAttachmentAssigned, "s3pa-uid", "42")
	e, err := events.New(testSource, id, payload(events.TypeAttachmentAssigned, "node-a"))
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	first := b.publish(t, e)
	second, err := b.pub.Publish(testContext(t, 10*time.Second), e)
	if err != nil {
		t.Fatalf("publish again: %v", err)
	}
	if !second.Duplicate || second.Sequence != first.Sequence {
		t.Errorf("second PubAck = %+v, want a duplicate of sequence %d", second, first.Sequence)
	}
	info, err := b.js.Stream(testContext(t, 5*time.Second), events.StreamName)
	if err != nil {
		t.Fatalf("look up stream: %v", err)
	}
	if msgs := info.CachedInfo().State.Msgs; msgs != 1 {
		t.Errorf("stream holds %d messages, want 1", msgs)
	}
}

func TestPublishRefusesInvalidEvents(t *testing.T) {
	b := newBus(t)
	e := event.New()
	e.SetID("1")
	e.SetSource(testSource)
	e.SetType(string(events.TypeAttachmentAssigned))
	if err := e.SetData(event.ApplicationJSON, map[string]string{"node": "node-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.Publish(testContext(t, 5*time.Second), e); err == nil {
		t.Fatal("an event without the required payload fields was published")
	}
}

func TestPublishGivesUpWhenItsContextEnds(t *testing.T) {
	b := newBus(t)
	b.srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.pub.Publish(ctx, mustNew(t, payload(events.TypeVolumeCreated, "")))
	if err == nil {
		t.Fatal("publish succeeded with NATS down")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("publish returned %s after its context ended", took)
	}
}

func TestHandlerOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		maxDeliver int
		fail       func(id string, call int) error
		wantCalls  int
	}{
		{name: "a handler that succeeds is called once", wantCalls: 1},
		{name: "a handler error is redelivered and the later success acknowledges it",
			fail: func(_ string, call int) error {
				if call == 1 {
					return errTransient
				}
				return nil
			}, wantCalls: 2},
		{name: "a permanent handler error terminates the event at once",
			fail: func(id string, _ int) error {
				return fmt.Errorf("reconcile %s: %w", id, events.ErrPermanent)
			}, wantCalls: 1},
		{name: "MaxDeliver bounds the deliveries to a handler that always fails", maxDeliver: 3,
			fail: func(string, int) error { return errTransient }, wantCalls: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBus(t)
			e := b.publishAssigned(t, "node-a")
			rec := newRecorder(tt.fail)
			const ackWait = 300 * time.Millisecond
			b.consume(t, events.ConsumerConfig{
				Durable:        "outcomes",
				FilterSubjects: events.NodeSubjects("node-a", events.TypeAttachmentAssigned),
				MaxDeliver:     tt.maxDeliver,
				Backoff:        []time.Duration{20 * time.Millisecond},
				AckWait:        ackWait,
			}, rec.handle)
			eventually(t, 10*time.Second, fmt.Sprintf("%d handler calls", tt.wantCalls),
				func() bool { return rec.total() >= tt.wantCalls })
			// Longer than AckWait and the backoff: an unsettled event would come back.
			time.Sleep(3 * ackWait)
			if calls, _ := rec.snapshot(); calls[e.ID()] != tt.wantCalls || len(calls) != 1 {
				t.Errorf("handler calls %v, want %d for %s", calls, tt.wantCalls, e.ID())
			}
			info := b.consumerInfo(t, "outcomes")
			if info.NumAckPending != 0 || info.NumPending != 0 || info.Delivered.Consumer != uint64(tt.wantCalls) {
				t.Errorf("consumer pending %d, ack pending %d, deliveries %d; want 0, 0, %d",
					info.NumPending, info.NumAckPending, info.Delivered.Consumer, tt.wantCalls)
			}
		})
	}
}

func TestPoisonEventsAreTerminatedAfterOneDelivery(t *testing.T) {
	b := newBus(t)
	subject, err := events.Subject(events.TypeAttachmentAssigned, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := events.Encode(mustNew(t, payload(events.TypeAttachmentAssigned, "node-b")))
	if err != nil {
		t.Fatal(err)
	}
	wrongType, err := events.Encode(mustNew(t, payload(events.TypeMountFailed, "node-a")))
	if err != nil {
		t.Fatal(err)
	}
	b.publishRaw(t, subject, []byte("\x00 garbage {"))
	b.publishRaw(t, subject, foreign)   // valid, but about node-b
	b.publishRaw(t, subject, wrongType) // valid, but another type's subject
	good := b.publishAssigned(t, "node-a")

	rec := newRecorder(nil)
	const ackWait = 300 * time.Millisecond
	b.consume(t, events.ConsumerConfig{
		Durable:        "poison",
		FilterSubjects: events.NodeSubjects("node-a", events.TypeAttachmentAssigned),
		AckWait:        ackWait,
		Backoff:        []time.Duration{20 * time.Millisecond},
	}, rec.handle)
	eventually(t, 10*time.Second, "the valid event was handled", func() bool { return rec.total() >= 1 })
	time.Sleep(3 * ackWait)
	if calls, _ := rec.snapshot(); !maps.Equal(calls, map[string]int{good.ID(): 1}) {
		t.Errorf("handler calls %v, want only %s once", calls, good.ID())
	}
	info := b.consumerInfo(t, "poison")
	if info.Delivered.Consumer != 4 || info.NumRedelivered != 0 || info.NumAckPending != 0 {
		t.Errorf("deliveries %d, redelivered %d, ack pending %d; want 4, 0, 0",
			info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending)
	}
}

func TestNoAcknowledgedEventIsLostAcrossServerRestarts(t *testing.T) {
	b := newBus(t)
	var want []string
	for range 3 { // acknowledged by the stream before the restart
		want = append(want, b.publishAssigned(t, "node-a").ID())
	}
	b.srv.Restart(t)
	for range 2 { // on the same connection, which has to reconnect first
		want = append(want, b.publishAssigned(t, "node-a").ID())
	}

	rec := newRecorder(nil)
	b.consume(t, events.ConsumerConfig{
		Durable: "restart", FilterSubjects: events.NodeSubjects("", events.Types()...),
	}, rec.handle)
	eventually(t, 10*time.Second, "5 events handled", func() bool { return rec.total() >= 5 })

	b.srv.Restart(t) // while the consumer runs
	want = append(want, b.publishAssigned(t, "node-a").ID())
	eventually(t, 20*time.Second, "the event published after the second restart was handled",
		func() bool { return rec.total() >= 6 })

	calls, order := rec.snapshot()
	if got := slices.Sorted(maps.Keys(calls)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("handled %v, want %v", order, want)
	}
	if b.nc.Stats().Reconnects < 2 {
		t.Errorf("connection reconnected %d times, want 2", b.nc.Stats().Reconnects)
	}
}

func TestConsumerWaitsForTheStream(t *testing.T) {
	b := newBus(t)
	if err := b.js.DeleteStream(testContext(t, 5*time.Second), events.StreamName); err != nil {
		t.Fatalf("delete stream: %v", err)
	}
	rec := newRecorder(nil)
	b.consume(t, events.ConsumerConfig{Durable: "early", FilterSubjects: events.NodeSubjects("node-a")}, rec.handle)
	time.Sleep(100 * time.Millisecond) // Start fails to create the consumer at least once
	if _, err := events.EnsureStream(testContext(t, 5*time.Second), b.js, events.StreamConfig{}); err != nil {
		t.Fatalf("ensure stream: %v", err)
	}
	e := b.publishAssigned(t, "node-a")
	eventually(t, 10*time.Second, "the event was handled", func() bool { return rec.total() >= 1 })
	if calls, _ := rec.snapshot(); calls[e.ID()] != 1 {
		t.Errorf("handler calls %v, want %s once", calls, e.ID())
	}
}

// TestAConsumerCreatesAMissingStream: a consumer given the stream's limits does not wait for a
// publisher to create the stream: it creates it, with those limits, and its durable with it, so
// the first event published after is delivered.
func TestAConsumerCreatesAMissingStream(t *testing.T) {
	b := newBus(t)
	ctx := testContext(t, 20*time.Second)
	if err := b.js.DeleteStream(ctx, events.StreamName); err != nil {
		t.Fatalf("delete stream: %v", err)
	}
	rec := newRecorder(nil)
	b.consume(t, events.ConsumerConfig{
		Durable: "first", FilterSubjects: events.NodeSubjects("node-a"),
		Stream: &events.StreamConfig{MaxAge: time.Hour},
	}, rec.handle)
	eventually(t, 10*time.Second, "the consumer created the stream and its durable", func() bool {
		_, err := b.js.Consumer(ctx, events.StreamName, "first")
		return err == nil
	})
	s, err := b.js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != time.Hour {
		t.Errorf("the stream keeps events %s, want the consumer's 1h", got)
	}
	e := b.publishAssigned(t, "node-a")
	eventually(t, 10*time.Second, "the event was handled", func() bool { return rec.total() >= 1 })
	if calls, _ := rec.snapshot(); calls[e.ID()] != 1 {
		t.Errorf("handler calls %v, want %s once", calls, e.ID())
	}
}

// publishAssigned publishes an attachment.assigned event about node with a random id.
func (b *bus) publishAssigned(t *testing.T, node string) event.Event {
	t.Helper()
	p := payload(events.TypeAttachmentAssigned, node).(*eventspb.AttachmentAssigned)
	e := mustNew(t, p)
	b.publish(t, e)
	return e
}
