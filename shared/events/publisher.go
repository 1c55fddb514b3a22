package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of PublisherOptions.
const (
	DefaultAttemptTimeout = 5 * time.Second
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
)

// MessageContentType is the Content-Type header of an event message: structured-mode
// CloudEvents JSON.
const MessageContentType = "application/cloudevents+json"

// PublisherOptions tune a Publisher; zero values take the defaults.
type PublisherOptions struct {
	// DuplicateWindow must equal the stream's (StreamConfig.DuplicateWindow; default 2 min):
	// retries of one event stop before it ends.
	DuplicateWindow time.Duration
	// AttemptTimeout bounds the wait for one PubAck (default 5 s).
	AttemptTimeout time.Duration
	// MinBackoff and MaxBackoff bound the pause between attempts (default 100 ms, 5 s).
	MinBackoff, MaxBackoff time.Duration
	// Log receives retries at V(1); default logr.Discard().
	Log logr.Logger
	// EnsureStream, when set, is called before the next attempt when an attempt found no
	// stream (a NATS without persistence restarted, or the stream was deleted): it creates the
	// stream again (OutboxFor sets it).
	EnsureStream func(ctx context.Context) error
}

// Publisher publishes events to the S3CSI_EVENTS stream. It is safe for concurrent use.
type Publisher struct {
	js   jetstream.JetStream
	opts PublisherOptions
}

// NewPublisher returns a Publisher on js.
func NewPublisher(js jetstream.JetStream, opts PublisherOptions) *Publisher {
	if opts.DuplicateWindow <= 0 {
		opts.DuplicateWindow = DefaultDuplicateWindow
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = DefaultAttemptTimeout
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	return &Publisher{js: js, opts: opts}
}

// Publish validates e, publishes it on the subject of its payload (the node comes from the
// payload) and returns the stream's PubAck. PubAck.Duplicate is true when the stream already
// held an event with this id.
//
// Problem: a PubAck can be lost (timeout, disconnect, NATS restart) after the stream stored the
// event, so "not acknowledged" does not mean "not stored"; and giving up on the first transient
// failure would lose the event.
// Solution: the event id is the Nats-Msg-Id, and transient failures (no responders, timeouts,
// disconnection) are retried with exponential backoff, only while the next attempt still ends
// inside the stream's duplicate window; the stream drops the copies.
// Invariant: one Publish stores the event at most once, and returns only when ctx is done, the
// window is spent, a permanent error occurred, or the stream acknowledged the event.
func (p *Publisher) Publish(ctx context.Context, e event.Event) (*jetstream.PubAck, error) {
	data, d, err := encode(e)
	if err != nil {
		return nil, fmt.Errorf("publish event: %w", err)
	}
	subject, err := d.Subject()
	if err != nil {
		return nil, fmt.Errorf("publish event %s: %w", e.ID(), err)
	}
	log := p.opts.Log.WithValues("event", e.ID(), "type", d.Type, "subject", subject)
	start := time.Now()
	backoff := p.opts.MinBackoff
	for attempt := 1; ; attempt++ {
		ack, err := p.publishOnce(ctx, subject, data, e.ID())
		if err == nil {
			if attempt > 1 {
				log.V(1).Info("published event after retries", "attempts", attempt, "duplicate", ack.Duplicate)
			}
			return ack, nil
		}
		if ctx.Err() != nil || !transient(err) {
			return nil, fmt.Errorf("publish event %s to %s: %w", e.ID(), subject, err)
		}
		if time.Since(start)+backoff+p.opts.AttemptTimeout > p.opts.DuplicateWindow {
			return nil, fmt.Errorf("publish event %s to %s: giving up after %d attempts in the duplicate window of %s: %w",
				e.ID(), subject, attempt, p.opts.DuplicateWindow, err)
		}
		log.V(1).Info("publish failed; retrying", "attempt", attempt, "backoff", backoff, "reason", err.Error())
		if p.opts.EnsureStream != nil && noStream(err) {
			if serr := p.opts.EnsureStream(ctx); serr != nil {
				log.Info("Creating the event stream again failed", "reason", serr.Error())
			} else {
				log.Info("Created the event stream again: it was gone")
			}
		}
		if err := sleep(ctx, backoff); err != nil {
			return nil, fmt.Errorf("publish event %s to %s: %w", e.ID(), subject, err)
		}
		backoff = min(2*backoff, p.opts.MaxBackoff)
	}
}

func (p *Publisher) publishOnce(ctx context.Context, subject string, data []byte, id string) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.AttemptTimeout)
	defer cancel()
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set("Content-Type", MessageContentType)
	return p.js.PublishMsg(ctx, msg,
		jetstream.WithMsgID(id),
		jetstream.WithExpectStream(StreamName),
		jetstream.WithRetryAttempts(0)) // Publish retries itself, with backoff.
}

// transient reports whether another attempt of the same publish may succeed. A deadline here
// is the attempt's own (the caller's ctx is checked first).
func transient(err error) bool {
	for _, t := range []error{
		jetstream.ErrNoStreamResponse, nats.ErrNoResponders, nats.ErrTimeout,
		context.DeadlineExceeded, nats.ErrDisconnected, nats.ErrReconnectBufExceeded,
	} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// noStream reports whether a publish found no stream to store it: JetStream answers nothing
// for a subject no stream listens to.
func noStream(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// sleep waits d or until ctx is done, without leaving a timer behind.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
