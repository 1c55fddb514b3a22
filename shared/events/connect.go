package events

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
)

const (
	// reconnectWait is the pause between reconnect attempts to the same server. A reconnect is
	// cheap (one client per service), and every second without NATS is a second in which
	// waiters fall back to their slow periodic re-read.
	reconnectWait = 500 * time.Millisecond
	// reconnectJitter spreads the reconnects of a whole DaemonSet after a NATS restart.
	reconnectJitter = 500 * time.Millisecond
	// pingInterval and maxPingsOut bound how long a connection that died silently (a network
	// partition: no RST, no FIN) goes unnoticed: about pingInterval*(maxPingsOut+1), 30 s, where
	// the client's defaults (2 min, 2) take 6 min, during which a consumer receives nothing.
	pingInterval = 10 * time.Second
	maxPingsOut  = 2
)

// Connect returns a connection to the NATS server at url that reconnects forever.
//
// Problem: NATS is an accelerator, not a dependency: a NATS outage, even at
// start-up, must never kill a service.
// Solution: RetryOnFailedConnect returns a connection even when the server is down, and
// MaxReconnects(-1) never gives up; publishes made while disconnected are buffered by the
// client or fail with an error the caller retries or falls back from.
// Invariant: the returned connection is closed only by the caller (nc.Close or nc.Drain).
//
// ctx is checked before connecting; the first attempt does not block beyond the dial timeout.
// opts are applied after the defaults, so tests may shorten the waits.
func Connect(ctx context.Context, url, name string, log logr.Logger, opts ...nats.Option) (*nats.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	log = log.WithValues("nats", url)
	all := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(reconnectWait),
		nats.ReconnectJitter(reconnectJitter, reconnectJitter),
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
		nats.ConnectHandler(func(*nats.Conn) {
			log.Info("connected to NATS")
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Info("disconnected from NATS; reconnecting", "reason", err.Error())
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("reconnected to NATS", "server", c.ConnectedUrlRedacted())
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			log.V(1).Info("reconnect to NATS failed; retrying", "reason", err.Error())
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			log.V(1).Info("NATS connection closed")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Error(err, "NATS asynchronous error", "subject", subject)
		}),
	}, opts...)
	nc, err := nats.Connect(url, all...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", url, err)
	}
	return nc, nil
}
