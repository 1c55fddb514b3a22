package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go/jetstream"
)

// handle settles one message: every path ends in exactly one of Ack, Nak or Term.
//
// Problem: JetStream redelivers what is not acknowledged: an event acknowledged before its
// effect is durable can be lost, and one that can never succeed would be retried forever.
// Solution: acknowledge (and wait for the server to confirm) only after the handler returned
// nil; terminate invalid events, events on the wrong subject, ErrPermanent failures and the
// last allowed delivery; otherwise Nak with the backoff for this delivery count.
// Invariant: an event is terminated only when retrying cannot help or MaxDeliver is spent.
func (c *Consumer) handle(ctx context.Context, msg jetstream.Msg) {
	log := c.log.WithValues("subject", msg.Subject())
	delivered := uint64(1)
	if meta, err := msg.Metadata(); err == nil {
		delivered = meta.NumDelivered
		c.cfg.Metrics.observe(c.cfg.Durable, meta.NumPending)
		log = log.WithValues("streamSeq", meta.Sequence.Stream, "delivery", delivered)
	}

	d, err := Decode(msg.Data())
	if err == nil {
		err = checkSubject(d, msg.Subject())
	}
	if err != nil {
		// Info, not Error: a forged or foreign message is not our fault, and is not retried.
		log.Info("terminating invalid event", "size", len(msg.Data()), "reason", truncate(err.Error()))
		c.settle(log, "terminate", msg.TermWithReason("invalid event"))
		return
	}
	log = log.WithValues("event", d.Event.ID(), "type", d.Type)
	if node := d.Node(); node != "" {
		log = log.WithValues("node", node)
	}

	herr := c.handler(ctx, d)
	switch {
	case herr == nil:
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		defer cancel()
		// A lost ack only means a redelivery after AckWait, which the handler tolerates.
		c.settle(log, "acknowledge", msg.DoubleAck(actx))
	case errors.Is(herr, ErrPermanent):
		log.Info("terminating event: handler failed permanently", "reason", truncate(herr.Error()))
		c.settle(log, "terminate", msg.TermWithReason("permanent handler failure"))
	case ctx.Err() != nil:
		// Shutting down: let another replica, or this one after a restart, have it now.
		c.settle(log, "nak", msg.Nak())
	case c.cfg.MaxDeliver > 0 && delivered >= uint64(c.cfg.MaxDeliver):
		log.Error(herr, "giving up on event: last allowed delivery failed", "maxDeliver", c.cfg.MaxDeliver)
		c.settle(log, "terminate", msg.TermWithReason("max deliveries reached"))
	default:
		delay := c.backoff(delivered)
		log.V(1).Info("handler failed; event will be redelivered", "reason", truncate(herr.Error()), "delay", delay)
		c.settle(log, "nak", msg.NakWithDelay(delay))
	}
}

// checkSubject rejects an event whose subject is not the one its payload implies, e.g. a
// node-scoped event about node b on node a's subject: a node's consumer trusts the filter to
// show it only its own events. The subject is derived from type and NodeToken(node).
func checkSubject(d *Decoded, subject string) error {
	want, err := d.Subject()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if subject != want {
		return invalid("%s event about node %q arrived on %s, want %s", d.Type, d.Node(), subject, want)
	}
	return nil
}

// backoff is the delay after the delivered-th failed delivery; the last entry repeats.
func (c *Consumer) backoff(delivered uint64) time.Duration {
	i := min(int(delivered), len(c.cfg.Backoff)) - 1
	return c.cfg.Backoff[max(i, 0)]
}

func (c *Consumer) settle(log logr.Logger, what string, err error) {
	if err != nil {
		log.Error(err, "settling event failed; the server redelivers it after AckWait", "action", what)
	}
}

func truncate(s string) string {
	if len(s) <= maxReasonLen {
		return s
	}
	return s[:maxReasonLen] + "…"
}
