// Package app wires the csi-controller's components together and runs them until shutdown.
package app

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"

	"github.com/s3csi/s3csi/shared/admin"
	sharedcsi "github.com/s3csi/s3csi/shared/csiserver"
	"github.com/s3csi/s3csi/shared/events"

	"github.com/s3csi/s3csi/services/csi-controller/internal/controller"
	"github.com/s3csi/s3csi/services/csi-controller/internal/csiserver"
	"github.com/s3csi/s3csi/services/csi-controller/internal/metrics"
	"github.com/s3csi/s3csi/services/csi-controller/internal/options"
	"github.com/s3csi/s3csi/services/csi-controller/internal/proof"
	"github.com/s3csi/s3csi/services/csi-controller/internal/s3client"
)

// clientName names the csi-controller's NATS connection.
const clientName = "s3csi-controller"

// Run runs the csi-controller until ctx is canceled, then stops every component and returns
// nil; it returns an error when a component fails. It logs through the logr.Logger in ctx,
// which main builds from opts.Logging and installs for controller-runtime and client-go too.
//
// Leader election: none. CreateVolume and DeleteVolume are driven by the external-provisioner
// sidecar, which elects its own leader, so every replica may serve the CSI Controller service;
// they stay correct side by side because both RPCs are idempotent on the bucket name.
func Run(ctx context.Context, opts *options.Options) error {
	svc, err := newService(ctx, opts, logr.FromContextOrDiscard(ctx))
	if err != nil {
		return fmt.Errorf("run csi-controller: %w", err)
	}
	return svc.run(ctx)
}

// service holds the csi-controller's runnables. It is built before it runs so that tests can
// reach the admin server's bound address when listening on port 0.
type service struct {
	opts      *options.Options
	admin     *admin.Server
	csi       *sharedcsi.Server
	outbox    *events.Outbox
	closeNATS func()
	metrics   *metrics.Metrics
}

// newService builds the service. The NATS connection is made here but never waited for: it
// retries in the background, so the controller starts and serves while NATS is down.
func newService(ctx context.Context, opts *options.Options, log logr.Logger) (*service, error) {
	reg := admin.NewRegistry()
	m := metrics.New(reg)
	eventMetrics, err := events.NewOutboxMetrics(reg)
	if err != nil {
		return nil, err
	}
	ep := s3client.Endpoint{URL: opts.S3Endpoint, Region: opts.S3Region, CABundle: opts.S3CABundle, PathStyle: opts.S3PathStyle}
	hc, err := s3client.NewHTTPClient(ep)
	if err != nil {
		return nil, fmt.Errorf("build S3 HTTP client: %w", err)
	}
	creds := controller.EnvCredentials()
	if opts.CredentialsDir != "" {
		creds = controller.DirCredentials(opts.CredentialsDir)
	}
	keys, err := proof.LoadDir(opts.OwnershipKeysDir)
	if err != nil {
		return nil, fmt.Errorf("--ownership-keys-dir: %w", err)
	}
	outbox, closeNATS, err := events.OpenOutbox(ctx, opts.NATSURL, clientName, events.OutboxOptions{
		Source: controller.EventSource, Metrics: eventMetrics, Log: log.WithName("events"),
		Connect: opts.NATSAuth.Options(), Stream: opts.StreamConfig(),
	})
	if err != nil {
		return nil, err
	}
	ctrl, err := controller.New(controller.Config{
		Endpoint: ep, HTTPClient: hc, DriverCredentials: creds, CredentialsCacheTTL: opts.CredentialsCacheTTL,
		BucketPrefix: opts.BucketPrefix, OwnershipKeys: keys, Metrics: m, Notifier: outbox,
	})
	if err != nil {
		closeNATS()
		return nil, err
	}
	srv := csiserver.New(opts.CSIEndpoint, csiserver.NewIdentity(opts.DriverVersion), ctrl, m, log.WithName("csi"))
	a := admin.New(opts.AdminAddr, reg)
	a.AddReadyCheck(
		admin.Check{Name: "csi-server", Fn: srv.Ready},
		admin.Check{Name: "s3-endpoint", Fn: reachable(opts.S3Endpoint)},
	)
	return &service{opts: opts, admin: a, csi: srv, outbox: outbox, closeNATS: closeNATS, metrics: m}, nil
}

// run starts every runnable under one errgroup: the first to fail cancels the others, and run
// returns only once all have stopped, so no goroutine outlives it.
func (s *service) run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	defer s.closeNATS()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.admin.Start(ctx) })
	g.Go(func() error { return s.csi.Start(ctx) })
	g.Go(func() error { return s.outbox.Start(ctx) })

	log.Info("Started csi-controller", "s3Endpoint", s.opts.S3Endpoint, "events", s.opts.NATSURL != "")
	if err := g.Wait(); err != nil {
		return fmt.Errorf("run csi-controller: %w", err)
	}
	log.Info("Stopped csi-controller")
	return nil
}

// reachable is a readiness check that the S3 endpoint accepts TCP connections. It does not
// sign a request: each volume may use other credentials, and a credential problem is reported
// by the RPC that meets it.
func reachable(endpoint string) func(context.Context) error {
	return func(ctx context.Context) error {
		u, err := url.Parse(endpoint)
		if err != nil {
			return fmt.Errorf("parse S3 endpoint: %w", err)
		}
		host := u.Host
		if u.Port() == "" {
			port := "443"
			if u.Scheme == "http" {
				port = "80"
			}
			host = net.JoinHostPort(u.Hostname(), port)
		}
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			return fmt.Errorf("reach S3 endpoint %s: %w", host, err)
		}
		return conn.Close()
	}
}
