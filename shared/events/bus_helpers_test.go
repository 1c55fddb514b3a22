package events_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/testenv"
)

// bus is a real embedded JetStream server with the events stream and one client connection.
type bus struct {
	srv *testenv.NATS
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *events.Publisher
}

func newBus(t *testing.T) *bus {
	t.Helper()
	b := &bus{srv: testenv.StartNATS(t)}
	ctx := testContext(t, 10*time.Second)
	nc, err := events.Connect(ctx, b.srv.URL(), t.Name(), logr.Discard())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close) // runs before the server stops (cleanups are LIFO)
	b.nc = nc
	if b.js, err = jetstream.New(nc); err != nil {
		t.Fatalf("create JetStream context: %v", err)
	}
	if _, err := events.EnsureStream(ctx, b.js, events.StreamConfig{}); err != nil {
		t.Fatalf("ensure stream: %v", err)
	}
	b.pub = events.NewPublisher(b.js, events.PublisherOptions{MaxBackoff: 200 * time.Millisecond})
	return b
}

// publish publishes e and fails the test unless the stream stored it as new.
func (b *bus) publish(t *testing.T, e event.Event) *jetstream.PubAck {
	t.Helper()
	ack, err := b.pub.Publish(testContext(t, 20*time.Second), e)
	if err != nil {
		t.Fatalf("publish %s: %v", e.ID(), err)
	}
	if ack.Duplicate {
		t.Fatalf("publish %s: stored as a duplicate", e.ID())
	}
	return ack
}

// publishRaw stores bytes on a subject, bypassing every check of the Publisher.
func (b *bus) publishRaw(t *testing.T, subject string, data []byte) {
	t.Helper()
	if _, err := b.js.Publish(testContext(t, 10*time.Second), subject, data); err != nil {
		t.Fatalf("publish raw to %s: %v", subject, err)
	}
}

// consume runs a Consumer until the test ends (or the returned stop is called) and fails the
// test if Start returns an error or does not return within 10 s of its context ending.
func (b *bus) consume(t *testing.T, cfg events.ConsumerConfig, h events.Handler) (stop func()) {
	t.Helper()
	c, err := events.NewConsumer(b.js, cfg, h, logr.Discard())
	if err != nil {
		t.Fatalf("new consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Start returned %v, want nil after its context ended", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("Start did not return within 10s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (b *bus) consumerInfo(t *testing.T, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := testContext(t, 5*time.Second)
	c, err := b.js.Consumer(ctx, events.StreamName, durable)
	if err != nil {
		t.Fatalf("look up consumer %s: %v", durable, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("read consumer %s: %v", durable, err)
	}
	return info
}

// recorder is a Handler that records the ids it saw; fail decides each call's result.
type recorder struct {
	mu    sync.Mutex
	calls map[string]int
	order []string
	fail  func(id string, call int) error
}

func newRecorder(fail func(id string, call int) error) *recorder {
	return &recorder{calls: map[string]int{}, fail: fail}
}

func (r *recorder) handle(_ context.Context, d *events.Decoded) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := d.Event.ID()
	r.calls[id]++
	r.order = append(r.order, id)
	if r.fail != nil {
		return r.fail(id, r.calls[id])
	}
	return nil
}

func (r *recorder) snapshot() (calls map[string]int, order []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls = make(map[string]int, len(r.calls))
	for k, v := range r.calls {
		calls[k] = v
	}
	return calls, append([]string(nil), r.order...)
}

// total is the number of handler calls.
func (r *recorder) total() int {
	_, order := r.snapshot()
	return len(order)
}

// eventually polls cond until it holds or timeout passes, then fails the test with what.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var errTransient = errors.New("transient handler failure")
