// Package app wires the janitor's components together and runs them until shutdown.
package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/s3csi/s3csi/shared/admin"
	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/servicecmd"

	"github.com/s3csi/s3csi/services/janitor/internal/cleanup"
	"github.com/s3csi/s3csi/services/janitor/internal/options"
)

// Names the janitor is known by on the API server and the bus.
const (
	// LeaseName is the leader-election Lease.
	LeaseName = "s3csi-janitor"
	// ConsumerName is the durable JetStream consumer; replicas share it.
	ConsumerName = events.JanitorDurable
	// clientName names the NATS connection in the server's monitoring.
	clientName = "s3csi-janitor"
	// eventSource is the CloudEvents source of the janitor's events.
	eventSource = "/s3csi/janitor"
)

// Run runs the janitor until ctx is canceled, then stops every component and returns
// nil; it returns an error when a component fails. It logs through the logr.Logger in ctx,
// which main builds from opts.Logging and installs for controller-runtime and client-go too.
//
// Leader election: the sweep, the targeted checks and the event consumer run only on the
// leader (--leader-elect). Two active replicas could both decide the same object is stale and
// one could delete what the other just saw reused. The admin endpoint, the caches and the
// event outbox run on every replica, so probes work on standbys and a new leader starts warm.
func Run(ctx context.Context, opts *options.Options) error {
	s, err := newService(opts)
	if err != nil {
		return err
	}
	return s.run(ctx)
}

// service holds the janitor's parts. It is built before it runs so that tests can reach the
// admin server's bound address when listening on port 0, and the metrics.
type service struct {
	opts     *options.Options
	admin    *admin.Server
	metrics  *cleanup.Metrics
	events   *events.OutboxMetrics
	consumer *events.ConsumerMetrics
}

func newService(opts *options.Options) (*service, error) {
	reg := admin.NewRegistry()
	eventMetrics, err := events.NewOutboxMetrics(reg)
	if err != nil {
		return nil, err
	}
	consumerMetrics, err := events.NewConsumerMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &service{opts: opts, admin: admin.New(opts.AdminAddr, reg), metrics: cleanup.NewMetrics(reg),
		events: eventMetrics, consumer: consumerMetrics}, nil
}

// run starts the admin server and the manager under one errgroup: the first to fail cancels the
// other, and run returns only once both have stopped, so no goroutine outlives it.
func (s *service) run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	mgr, nc, err := s.build(ctx, log)
	if err != nil {
		return fmt.Errorf("run janitor: %w", err)
	}
	if nc != nil {
		defer nc.Close()
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.admin.Start(ctx) })
	g.Go(func() error { return mgr.Start(ctx) })
	log.Info("Started janitor", "dryRun", s.opts.DryRun, "sweepInterval", s.opts.SweepInterval,
		"leaderElect", s.opts.LeaderElect, "events", nc != nil)
	if err := g.Wait(); err != nil {
		return fmt.Errorf("run janitor: %w", err)
	}
	log.Info("Stopped janitor")
	return nil
}

// build creates the manager with the janitor's runnables, and the NATS connection when events
// are enabled (the caller closes it after the manager stopped).
func (s *service) build(ctx context.Context, log logr.Logger) (manager.Manager, *nats.Conn, error) {
	cfg, err := servicecmd.RESTConfig(s.opts.Kubeconfig, clientName)
	if err != nil {
		return nil, nil, err
	}
	s.opts.ApplyRateLimit(cfg)
	if err := servicecmd.WaitForAPIServer(logr.NewContext(ctx, log), cfg, servicecmd.APIServerWait); err != nil {
		return nil, nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, fmt.Errorf("build scheme: %w", err)
	}
	if err := s3csiv2.AddToScheme(scheme); err != nil {
		return nil, nil, fmt.Errorf("build scheme: %w", err)
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                        scheme,
		Logger:                        log,
		Cache:                         cleanup.CacheOptions(),
		Metrics:                       metricsserver.Options{BindAddress: "0"}, // served by the admin server
		HealthProbeBindAddress:        "0",
		LeaderElection:                s.opts.LeaderElect,
		LeaderElectionID:              LeaseName,
		LeaderElectionNamespace:       s.opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create manager: %w", err)
	}
	// The API server answered above. Helm never upgrades a CRD it finds (an older release's, the
	// Scality driver's): the janitor brings it to the one its types need, then checks it.
	if err := s3csiv2.ApplyCRD(ctx, mgr.GetClient()); err != nil {
		log.Error(err, "Cannot upgrade the attachment CRD; checking it as it is")
	} else {
		log.Info("Applied the attachment CRD", "crd", s3csiv2.CRDName)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("create discovery client: %w", err)
	}
	if err := servicecmd.CheckCRD(logr.NewContext(ctx, log), mgr.GetAPIReader(), disco.OpenAPIV3(), time.Second, servicecmd.CRDPatience); err != nil {
		return nil, nil, err
	}
	s.admin.AddReadyCheck(admin.Check{Name: "informer-sync", Fn: func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("caches not synced")
		}
		return nil
	}})

	var notify cleanup.Notifier = events.NewOutbox(nil, events.OutboxOptions{}) // discards
	var nc *nats.Conn
	var js jetstream.JetStream
	if s.opts.NATSURL != "" {
		if nc, js, err = connect(ctx, s.opts.NATSURL, s.opts.NATSAuth, log); err != nil {
			return nil, nil, err
		}
		ob := events.OutboxFor(js, events.OutboxOptions{
			Source: eventSource, Metrics: s.events, Log: log, Stream: s.opts.StreamConfig(),
		})
		notify = ob
		if err := mgr.Add(everyReplica{ob}); err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("add event outbox: %w", err)
		}
	}
	_, triggers, err := cleanup.Setup(ctx, mgr, s.cleanupConfig(), notify, s.metrics, log)
	if err == nil && js != nil {
		err = addConsumer(mgr, js, triggers, s.consumer, s.opts.StreamConfig(), log)
	}
	if err != nil {
		if nc != nil {
			nc.Close()
		}
		return nil, nil, err
	}
	return mgr, nc, nil
}

func (s *service) cleanupConfig() cleanup.Config {
	return cleanup.Config{
		MountpointNamespace: s.opts.MountpointNamespace,
		SweepInterval:       s.opts.SweepInterval,
		StaleAfter:          s.opts.StaleAfter,
		UnmountGrace:        s.opts.UnmountGrace,
		NodeGoneGrace:       s.opts.NodeGoneGrace,
		DryRun:              s.opts.DryRun,
	}
}

func connect(ctx context.Context, url string, auth events.Auth, log logr.Logger) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := events.Connect(ctx, url, clientName, log, auth.Options()...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open JetStream: %w", err)
	}
	return nc, js, nil
}

// addConsumer adds the durable consumer of the events that trigger targeted checks. It is a
// leader-elected runnable: the checks it queues run on the leader only. A new durable starts
// with new events: old ones describe what the sweep has long handled.
func addConsumer(mgr manager.Manager, js jetstream.JetStream, triggers *cleanup.Triggers,
	metrics *events.ConsumerMetrics, stream events.StreamConfig, log logr.Logger,
) error {
	cons, err := events.NewConsumer(js, events.ConsumerConfig{
		Durable:        ConsumerName,
		FilterSubjects: cleanup.EventSubjects(),
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		Metrics:        metrics,
		Stream:         &stream,
	}, triggers.HandleEvent, log)
	if err != nil {
		return fmt.Errorf("create event consumer: %w", err)
	}
	if err := mgr.Add(cons); err != nil {
		return fmt.Errorf("add event consumer: %w", err)
	}
	return nil
}

// everyReplica runs a runnable on every replica, leader or not.
type everyReplica struct{ manager.Runnable }

// NeedLeaderElection is false: see everyReplica.
func (everyReplica) NeedLeaderElection() bool { return false }
