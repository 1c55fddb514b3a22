// Package bus connects kubectl s3csi to the s3csi NATS and turns what can go wrong there
// (unreachable server, refused credentials, missing stream, denied permission) into one-line
// errors that say what to do.
package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
)

// DefaultURL is where a port-forwarded NATS listens:
// kubectl -n <namespace> port-forward svc/s3csi-nats 4222.
const DefaultURL = "nats://127.0.0.1:4222"

// connectTimeout bounds the dial and the handshake with the server.
const connectTimeout = 5 * time.Second

// Options say how to reach NATS.
type Options struct {
	// URL lists the NATS servers, comma separated.
	URL string
	// Auth is the user, password file and TLS files, as the services take them.
	Auth events.Auth
}

// errDenied cancels the context of a Conn when the server reports a permissions violation.
var errDenied = errors.New("NATS denied a request")

// Conn is a connection to NATS with its JetStream context.
type Conn struct {
	NC   *nats.Conn
	JS   jetstream.JetStream
	opts Options

	mu     sync.Mutex
	denied string // the last permissions violation the server reported
	// guards are the cancel functions of the contexts of Guard.
	guards []context.CancelCauseFunc
}

// Guard returns ctx, ended also when NATS denies a request of c: run every call under it.
//
// Problem: the server answers a denied request with an asynchronous -ERR, never with a reply,
// so the request would wait for its context's deadline, which a command has none of.
// Solution: the error handler cancels every guarded context.
// Invariant: a denied request fails at once, and Explain names the denial.
func (c *Conn) Guard(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.denied != "" {
		cancel(errDenied)
	}
	c.guards = append(c.guards, cancel)
	return ctx, func() { cancel(context.Canceled) }
}

// Connect dials NATS once and fails at once when it cannot: a command line tool must not retry
// in silence. With a user, replies come to the user's own inbox (events.InboxPrefix), the only
// one the users of kubectl s3csi may subscribe to.
func Connect(ctx context.Context, opts Options) (*Conn, error) {
	if err := events.ValidateURLs(opts.URL); err != nil {
		return nil, fmt.Errorf("--nats-url: %w", err)
	}
	if opts.URL == "" {
		return nil, errors.New("--nats-url is empty: pass the URL of the s3csi NATS (e.g. " + DefaultURL + " when port-forwarded)")
	}
	c := &Conn{opts: opts}
	nopts := append(opts.Auth.Options(),
		nats.Name("kubectl-s3csi"),
		nats.Timeout(connectTimeout),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.denied = err.Error()
				for _, cancel := range c.guards {
					cancel(errDenied)
				}
			}
		}),
	)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	nc, err := nats.Connect(opts.URL, nopts...)
	if err != nil {
		return nil, c.explainConnect(err)
	}
	c.NC = nc
	if c.JS, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("use JetStream: %w", err)
	}
	return c, nil
}

// Close closes the connection.
func (c *Conn) Close() { c.NC.Close() }

func (c *Conn) explainConnect(err error) error {
	who := "without a user"
	if c.opts.Auth.User != "" {
		who = fmt.Sprintf("as user %q", c.opts.Auth.User)
	}
	msg := err.Error()
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		strings.Contains(strings.ToLower(msg), "authorization violation"):
		return fmt.Errorf("NATS at %s refused the connection %s: pass --nats-user audit (or replay) "+
			"and --nats-password-file with that user's password, the key of that name in the Secret s3csi-nats-auth", c.opts.URL, who)
	case strings.Contains(msg, "x509:") || strings.Contains(msg, "tls: "):
		return fmt.Errorf("NATS at %s serves TLS with a certificate this client does not trust (%s): pass --nats-tls-ca-file with the CA, "+
			"for the chart's NATS the key ca.crt of the Secret s3csi-nats-tls", c.opts.URL, oneLine(msg))
	case errors.Is(err, nats.ErrNoServers), strings.Contains(msg, "connection refused"),
		strings.Contains(msg, "i/o timeout"), strings.Contains(msg, "no such host"):
		return fmt.Errorf("cannot reach NATS at %s (%s): port-forward it first "+
			"(kubectl -n <s3csi namespace> port-forward svc/s3csi-nats 4222) or pass --nats-url", c.opts.URL, oneLine(msg))
	}
	return fmt.Errorf("connect to NATS at %s %s: %s", c.opts.URL, who, oneLine(msg))
}

// Explain turns an error of a JetStream call into what the user should do about it.
func (c *Conn) Explain(err error) error {
	if err == nil {
		return nil
	}
	c.mu.Lock()
	denied := c.denied
	c.mu.Unlock()
	switch {
	case denied != "":
		return fmt.Errorf("NATS denied user %q a request (%s): use a user allowed to do this (audit reads, replay republishes)",
			c.opts.Auth.User, oneLine(denied))
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("the stream %s does not exist on the NATS at %s: no s3csi service has started against it yet, "+
			"or this is not the s3csi NATS (check --nats-url and the port-forward)", streamOf(err), c.opts.URL)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("JetStream is not enabled for this user on the NATS at %s: this is not the s3csi NATS, or the user is wrong", c.opts.URL)
	case errors.Is(err, events.ErrNoDirectRead):
		return fmt.Errorf("the stream %s does not allow direct reads: it was not created by this s3csi release, and the services never change an existing stream; "+
			"enable them as a NATS user allowed to (nats stream edit %s --allow-direct), then try again", events.StreamName, events.StreamName)
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("NATS at %s did not answer (%s): check that JetStream runs there and that the user may use it", c.opts.URL, oneLine(err.Error()))
	}
	return errors.New(oneLine(err.Error()))
}

// streamOf names the stream a not-found error is about.
func streamOf(err error) string {
	if strings.Contains(err.Error(), events.ReplayStreamName) {
		return events.ReplayStreamName
	}
	return events.StreamName
}

// oneLine keeps an error message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
