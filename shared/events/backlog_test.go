package events_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/s3csi/s3csi/shared/events"
)

// TestABurstOfEventsReachesAThrottledConsumerWhole is scenario S22: 100,000 events (10,000,
// still ten times the consumer's MaxAckPending, under the race detector, which acknowledges
// about 300 a second on two cores) published at once while one consumer handles 200 a second,
// then stalls. The stream holds the backlog (not the throttled consumer's client, which the
// server gives at most MaxAckPending events), the consumer's lag is exported, and once the
// throttle is lifted it catches up: both consumers handled every event and nothing more.
func TestABurstOfEventsReachesAThrottledConsumerWhole(t *testing.T) {
	total := 100000
	if raceEnabled {
		total = 10000
	}
	b := newBus(t)
	metrics, err := events.NewConsumerMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	subjects := events.NodeSubjects("node-a", events.TypeAttachmentAssigned)
	fast, throttled := newRecorder(nil), newRecorder(nil)
	release := make(chan struct{})
	var calls atomic.Int64
	b.consume(t, events.ConsumerConfig{Durable: "fast", FilterSubjects: subjects, Metrics: metrics}, fast.handle)
	b.consume(t, events.ConsumerConfig{Durable: "throttled", FilterSubjects: subjects, Metrics: metrics},
		func(ctx context.Context, d *events.Decoded) error {
			// 200 a second, and none after the first 1,000 until released: however long the
			// burst takes on a loaded machine, most of it waits.
			wait := 5 * time.Millisecond
			if calls.Add(1) > 1000 {
				wait = time.Hour
			}
			select {
			case <-release:
			case <-time.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
			return throttled.handle(ctx, d)
		})

	// The burst: 32 publishers at once, every event acknowledged by the stream as new.
	start := time.Now()
	ids := make([]string, total)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testContext(t, 5*time.Minute)
			for i := w; i < total; i += 32 {
				e, err := events.New(testSource, "", payload(events.TypeAttachmentAssigned, "node-a"))
				if err == nil {
					var ack *jetstream.PubAck
					if ack, err = b.pub.Publish(ctx, e); err == nil && ack.Duplicate {
						err = errors.New("stored as a duplicate")
					}
				}
				if err != nil {
					errs <- err
					return
				}
				ids[i] = e.ID()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish: %v", err)
	}
	t.Logf("published %d events in %s", total, time.Since(start).Round(time.Millisecond))

	eventually(t, 3*time.Minute, "the fast consumer handled every event", func() bool { return fast.total() >= total })
	t.Logf("the fast consumer handled them all after %s", time.Since(start).Round(time.Millisecond))
	info := b.consumerInfo(t, "throttled")
	handled := uint64(throttled.total()) //nolint:gosec // a count
	if info.NumPending < uint64(total/2) || info.NumAckPending > info.Config.MaxAckPending {
		t.Errorf("throttled consumer after %d handled: %d pending in the stream, %d delivered unacknowledged (max %d); "+
			"want the backlog in the stream and at most MaxAckPending delivered", handled, info.NumPending, info.NumAckPending, info.Config.MaxAckPending)
	}
	if lag := metrics.Pending("throttled"); lag < float64(total/2) {
		t.Errorf("lag metric of the throttled consumer %.0f after %d handled, want the backlog (> %d)", lag, handled, total/2)
	}

	close(release)
	caughtUp := time.Now()
	eventually(t, 5*time.Minute, "the throttled consumer caught up", func() bool { return throttled.total() >= total })
	t.Logf("the throttled consumer caught up %s after its throttle was lifted", time.Since(caughtUp).Round(time.Millisecond))
	time.Sleep(time.Second) // a redelivery, if any, would come now
	for name, rec := range map[string]*recorder{"fast": fast, "throttled": throttled} {
		calls, _ := rec.snapshot()
		missing := 0
		for _, id := range ids {
			if calls[id] == 0 {
				missing++
			}
		}
		if missing != 0 || len(calls) != total {
			t.Errorf("%s consumer: %d of %d events never handled, %d distinct handled", name, missing, total, len(calls))
		}
		info := b.consumerInfo(t, name)
		if info.NumPending != 0 || info.NumAckPending != 0 || metrics.Pending(name) != 0 {
			t.Errorf("%s consumer: %d pending, %d unacknowledged, lag metric %.0f; want all 0",
				name, info.NumPending, info.NumAckPending, metrics.Pending(name))
		}
	}
}
