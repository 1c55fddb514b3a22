package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go/jetstream"
)

// Handler acts on one valid event. It must be idempotent: an event can be delivered again when
// an acknowledgement is lost. Return nil once the effect is durable (the message is then
// acknowledged), an error wrapping ErrPermanent to drop the event, any other error to have it
// redelivered after a backoff.
type Handler func(ctx context.Context, d *Decoded) error

// Defaults of ConsumerConfig.
const (
	DefaultMaxDeliver = 10
	DefaultAckWait    = 30 * time.Second
)

// DefaultBackoff is the redelivery delay after the n-th failed delivery (the last entry repeats).
func DefaultBackoff() []time.Duration {
	return []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute}
}

const (
	// pullBatch is how many messages the client buffers. Events are rare hints, and a buffered
	// message's AckWait already runs, so a small buffer keeps slow handlers from expiring it.
	pullBatch = 8
	// ackTimeout bounds the wait for the server to confirm an acknowledgement.
	ackTimeout = 5 * time.Second
	// restartFloor and restartCeiling bound the pause before the consumer is set up again after the
	// server or the consumer went away.
	restartFloor, restartCeiling = 500 * time.Millisecond, 30 * time.Second
	// maxReasonLen keeps log lines about poison messages short: never the raw payload.
	maxReasonLen = 300
)

// ConsumerConfig describes a durable consumer of the stream; zero values take the defaults.
type ConsumerConfig struct {
	// Durable names the consumer; its position survives restarts of the service and of NATS.
	Durable string
	// FilterSubjects selects the events, e.g. NodeSubjects(node, TypeAttachmentAssigned).
	FilterSubjects []string
	// MaxDeliver bounds deliveries of one event (default 10; -1 for unlimited). On the last
	// delivery a failing event is terminated and logged as an error: JetStream would stop
	// redelivering it anyway, and terminating makes that explicit and visible.
	MaxDeliver int
	// Backoff is the delay before redelivery after the n-th failed delivery; the last entry
	// repeats (default DefaultBackoff()).
	Backoff []time.Duration
	// AckWait is how long a delivered event may stay unacknowledged before the server
	// redelivers it, e.g. when the service died mid-handler (default 30 s).
	AckWait time.Duration
	// DeliverPolicy is where a newly created durable starts (default all retained events).
	// The server refuses to change it on an existing consumer.
	DeliverPolicy jetstream.DeliverPolicy
	// Metrics, when set, receives the consumer's lag at every delivery.
	Metrics *ConsumerMetrics
	// Stream, when set, lets the consumer create the stream with these limits when it finds
	// none (a fresh install, or a NATS without persistence restarted), so the durable exists
	// from the service's start rather than after the first publish and a backoff. A service
	// whose NATS user may not create the stream leaves it nil and waits for a publisher.
	Stream *StreamConfig
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if len(c.Backoff) == 0 {
		c.Backoff = DefaultBackoff()
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	return c
}

func (c ConsumerConfig) validate() error {
	if c.Durable == "" || strings.ContainsAny(c.Durable, ".*> \t\r\n") {
		return fmt.Errorf("durable name %q is empty or contains '.', '*', '>' or whitespace", c.Durable)
	}
	if len(c.FilterSubjects) == 0 {
		return errors.New("no filter subjects")
	}
	for _, s := range c.FilterSubjects {
		if !strings.HasPrefix(s, SubjectPrefix+".") || strings.ContainsAny(s, " \t\r\n") {
			return fmt.Errorf("filter subject %q is outside %s.> or contains whitespace", s, SubjectPrefix)
		}
	}
	if c.MaxDeliver < -1 || c.AckWait < 0 {
		return fmt.Errorf("invalid MaxDeliver %d or AckWait %s", c.MaxDeliver, c.AckWait)
	}
	for _, d := range c.Backoff {
		if d < 0 {
			return fmt.Errorf("negative backoff %s", d)
		}
	}
	return nil
}

// Consumer is a runnable that feeds the events of a durable pull consumer to a Handler, one at
// a time in stream order (a negatively acknowledged event is retried later, out of order).
type Consumer struct {
	js      jetstream.JetStream
	cfg     ConsumerConfig
	handler Handler
	log     logr.Logger
}

// NewConsumer checks cfg and returns a Consumer; nothing is created on the server before Start.
func NewConsumer(js jetstream.JetStream, cfg ConsumerConfig, handler Handler, log logr.Logger) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("create consumer: %w", err)
	}
	if handler == nil {
		return nil, errors.New("create consumer: nil handler")
	}
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	return &Consumer{js: js, cfg: cfg, handler: handler, log: log.WithValues("consumer", cfg.Durable)}, nil
}

// Start creates or updates the durable consumer and handles events until ctx is done; then it
// returns nil, after every goroutine it started has ended. It does not need leader election:
// replicas of a service sharing a Durable share the work.
//
// Problem: NATS restarts, the consumer can be deleted, and pull requests die with a connection.
// Solution: the client re-issues pull requests after a reconnect; when the iterator fails
// (missed heartbeats, consumer deleted) Start sets the consumer up again, with backoff.
// Invariant: while ctx is alive, Start never returns and never gives up on the stream.
func (c *Consumer) Start(ctx context.Context) error {
	wait := restartFloor
	for {
		began := time.Now()
		err := c.consume(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(began) > restartCeiling {
			wait = restartFloor // it worked for a while: this is a new outage
		}
		c.log.Error(err, "consuming events failed; setting the consumer up again", "backoff", wait)
		if sleep(ctx, wait) != nil {
			return nil
		}
		wait = min(2*wait, restartCeiling)
	}
}

// consume runs one iterator until it fails or ctx is done.
func (c *Consumer) consume(ctx context.Context) error {
	cons, err := c.createOrUpdate(ctx)
	if errors.Is(err, jetstream.ErrStreamNotFound) && c.cfg.Stream != nil {
		if _, serr := EnsureStream(ctx, c.js, *c.cfg.Stream); serr != nil {
			return fmt.Errorf("create consumer %s: no stream, and creating it failed: %w", c.cfg.Durable, serr)
		}
		c.log.Info("Created the event stream: there was none")
		cons, err = c.createOrUpdate(ctx)
	}
	if err != nil {
		return fmt.Errorf("create or update consumer %s: %w", c.cfg.Durable, err)
	}
	c.cfg.Metrics.observe(c.cfg.Durable, cons.CachedInfo().NumPending)
	it, err := cons.Messages(jetstream.PullMaxMessages(pullBatch))
	if err != nil {
		return fmt.Errorf("iterate consumer %s: %w", c.cfg.Durable, err)
	}
	defer stopIterator(it)
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("receive event from %s: %w", c.cfg.Durable, err)
		}
		c.handle(ctx, msg)
	}
}

func (c *Consumer) createOrUpdate(ctx context.Context) (jetstream.Consumer, error) {
	return c.js.CreateOrUpdateConsumer(ctx, StreamName, jetstream.ConsumerConfig{
		Durable:        c.cfg.Durable,
		FilterSubjects: c.cfg.FilterSubjects,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        c.cfg.AckWait,
		MaxDeliver:     c.cfg.MaxDeliver,
		DeliverPolicy:  c.cfg.DeliverPolicy,
	})
}

// stopIterator stops it and waits, boundedly, until its subscription is gone, so no goroutine
// of it outlives Start. MessagesContext does not promise Closed; the durable consumer's
// iterator has it, and it is goroutine-free and re-checks the subscription on every call,
// hence the polling. (The ordered iterator's Closed would leak a goroutine: never call it.)
func stopIterator(it jetstream.MessagesContext) {
	it.Stop()
	c, ok := it.(interface{ Closed() <-chan struct{} })
	if !ok {
		return
	}
	for deadline := time.Now().Add(ackTimeout); time.Now().Before(deadline); {
		select {
		case <-c.Closed():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}
