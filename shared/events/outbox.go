package events

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// Defaults of OutboxOptions.
const (
	DefaultOutboxSize    = 10000
	DefaultOutboxWorkers = 4
	// maxRemembered bounds the set of acknowledged event ids kept to skip republishing.
	maxRemembered = 100000
	// prepareTimeout bounds one Prepare call, so that workers do not wait on it while NATS is down.
	prepareTimeout = 5 * time.Second
)

// Sink publishes one event and retries transient failures itself; *Publisher is one.
type Sink interface {
	Publish(ctx context.Context, e event.Event) (*jetstream.PubAck, error)
}

// OutboxOptions configure an Outbox; zero values take the defaults.
type OutboxOptions struct {
	// Size bounds the events waiting to be published (default DefaultOutboxSize).
	Size int
	// Workers is the number of concurrent publishes (default DefaultOutboxWorkers).
	Workers int
	// Prepare, when set, runs before the first publish and again before later ones until it
	// succeeds, e.g. to create the stream once NATS is reachable.
	Prepare func(ctx context.Context) error
	// Stream is the configuration OpenOutbox and OutboxFor create the stream with when it does
	// not exist (zero values take the defaults); an existing stream is left as it is.
	Stream StreamConfig
	// Source is the CloudEvents source of the events Notify builds, e.g. "/s3csi/janitor".
	Source string
	// Metrics, when set, counts what happens to each event.
	Metrics *OutboxMetrics
	// Log receives drops and failures.
	Log logr.Logger
	// Connect are options of the NATS connection OpenOutbox makes, e.g. Auth.Options().
	Connect []nats.Option
}

// Outbox publishes events asynchronously for services whose real work is an API write.
//
// Problem: an event must be published only after the API write it describes, and NATS being
// down must never block or fail the work that made the write (the write is what matters; an
// event is only a hint, and every consumer has a periodic fallback).
// Solution: callers Enqueue after the write succeeded; Enqueue never blocks. Workers publish
// with the Sink, which retries transient failures with backoff inside the stream's duplicate
// window, so a retried event is stored once (its id is the Nats-Msg-Id). When the queue is full
// the event is dropped and counted.
// Invariant: a caller waits for nothing but a channel send that cannot block; a lost event
// delays a consumer by at most its fallback period, never causes a wrong action.
type Outbox struct {
	sink Sink
	opts OutboxOptions
	ch   chan event.Event

	mu    sync.Mutex
	acked map[string]struct{}

	// prepMu serializes Prepare; prepared is set once it succeeded.
	prepMu   sync.Mutex
	prepared bool
}

// NewOutbox returns an Outbox publishing to sink. A nil sink disables events: Enqueue discards.
func NewOutbox(sink Sink, opts OutboxOptions) *Outbox {
	if opts.Size <= 0 {
		opts.Size = DefaultOutboxSize
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultOutboxWorkers
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	return &Outbox{sink: sink, opts: opts, ch: make(chan event.Event, opts.Size), acked: map[string]struct{}{}}
}

// OpenOutbox connects to NATS at url (empty: events disabled) and returns an Outbox, and the
// function that closes the connection. name identifies the connection on the server, e.g. the
// service name. Before its first publish the Outbox creates the stream with opts.Stream
// if it does not exist; it never changes the limits of an existing stream, which belong to
// whoever deployed it.
func OpenOutbox(ctx context.Context, url, name string, opts OutboxOptions) (*Outbox, func(), error) {
	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	if url == "" {
		log.Info("Events disabled: no NATS URL")
		return NewOutbox(nil, opts), func() {}, nil
	}
	nc, err := Connect(ctx, url, name, log, opts.Connect...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open JetStream: %w", err)
	}
	opts.Log = log
	return OutboxFor(js, opts), nc.Close, nil
}

// OutboxFor returns an Outbox publishing to js that, before its first publish, creates the
// stream with opts.Stream if it does not exist (see OpenOutbox), and creates it again when a
// publish finds it gone (a NATS without persistence restarted).
func OutboxFor(js jetstream.JetStream, opts OutboxOptions) *Outbox {
	ensure := func(ctx context.Context) error {
		if _, err := js.Stream(ctx, StreamName); err == nil {
			return nil
		}
		_, err := EnsureStream(ctx, js, opts.Stream)
		return err
	}
	opts.Prepare = ensure
	return NewOutbox(NewPublisher(js, PublisherOptions{Log: opts.Log.WithName("events"), EnsureStream: ensure}), opts)
}

// Enqueue schedules e for publication and returns at once. It reports whether e was queued:
// false when events are disabled, the same id was already acknowledged, or the queue is full.
func (o *Outbox) Enqueue(e event.Event) bool {
	if o.sink == nil || o.wasAcked(e.ID()) {
		return false
	}
	select {
	case o.ch <- e:
		o.opts.Metrics.queued()
		return true
	default:
		o.opts.Metrics.observe(e.Type(), outcomeDropped)
		o.opts.Log.Info("Dropped event: publish queue full", "event", e.ID(), "type", e.Type())
		return false
	}
}

// Notify builds the event of payload with the configured source and id, and enqueues it; it
// never blocks. An event that cannot be built (a payload missing a required field) is counted
// as failed and logged: it is a bug of the caller, never a reason to fail its work.
func (o *Outbox) Notify(id string, payload proto.Message) {
	e, err := New(o.opts.Source, id, payload)
	if err != nil {
		t, _ := TypeOf(payload)
		o.opts.Metrics.observe(string(t), outcomeFailed)
		o.opts.Log.Error(err, "Building an event failed; it is not published", "event", id)
		return
	}
	o.Enqueue(e)
}

// Start publishes queued events until ctx is canceled, then returns nil; events still queued
// are dropped (consumers re-read the API server on their periodic fallback).
func (o *Outbox) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range o.opts.Workers {
		wg.Go(func() { o.work(ctx) })
	}
	wg.Wait()
	return nil
}

func (o *Outbox) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-o.ch:
			o.opts.Metrics.dequeued()
			o.publish(ctx, e)
		}
	}
}

func (o *Outbox) publish(ctx context.Context, e event.Event) {
	if o.wasAcked(e.ID()) {
		return
	}
	o.prepare(ctx)
	ack, err := o.sink.Publish(ctx, e)
	if err != nil {
		if ctx.Err() == nil {
			o.opts.Metrics.observe(e.Type(), outcomeFailed)
			o.opts.Log.Info("Publish failed; consumers fall back to re-reading the API server",
				"event", e.ID(), "type", e.Type(), "reason", err.Error())
		}
		return
	}
	o.opts.Metrics.observe(e.Type(), outcomePublished)
	o.remember(e.ID())
	o.opts.Log.V(1).Info("Published event", "event", e.ID(), "type", e.Type(), "duplicate", ack.Duplicate)
}

func (o *Outbox) prepare(ctx context.Context) {
	if o.opts.Prepare == nil {
		return
	}
	o.prepMu.Lock()
	defer o.prepMu.Unlock()
	if o.prepared {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, prepareTimeout)
	defer cancel()
	if err := o.opts.Prepare(ctx); err != nil {
		o.opts.Log.Info("Preparing the event stream failed; publishing anyway", "reason", err.Error())
		return
	}
	o.prepared = true
}

func (o *Outbox) wasAcked(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.acked[id]
	return ok
}

// remember records an acknowledged id, so that work that repeats itself (a resync, a requeue)
// does not publish the same fact again. The set is bounded: when full it is cleared, and the
// stream's duplicate window catches the few republished events.
func (o *Outbox) remember(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.acked) >= maxRemembered {
		clear(o.acked)
	}
	o.acked[id] = struct{}{}
}
