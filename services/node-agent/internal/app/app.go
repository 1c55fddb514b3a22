// Package app wires the node-agent's components together and runs them until shutdown.
package app

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/admin"
	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/cabundle"
	"github.com/s3csi/s3csi/shared/csiserver"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/keymutex"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/servicecmd"
	"github.com/s3csi/s3csi/shared/version"

	"github.com/s3csi/s3csi/services/node-agent/internal/attach"
	"github.com/s3csi/s3csi/services/node-agent/internal/cleanup"
	"github.com/s3csi/s3csi/services/node-agent/internal/csi"
	"github.com/s3csi/s3csi/services/node-agent/internal/health"
	"github.com/s3csi/s3csi/services/node-agent/internal/metrics"
	"github.com/s3csi/s3csi/services/node-agent/internal/notify"
	"github.com/s3csi/s3csi/services/node-agent/internal/options"
	"github.com/s3csi/s3csi/services/node-agent/internal/podwatch"
	"github.com/s3csi/s3csi/services/node-agent/internal/registration"
	"github.com/s3csi/s3csi/services/node-agent/internal/taint"
)

// Run runs the node-agent until ctx is canceled, then stops every component and returns
// nil; it returns an error when a component fails. It logs through the logr.Logger in ctx,
// which main builds from opts.Logging and installs for controller-runtime and client-go too.
//
// Leader election: never. The node-agent is a DaemonSet and each replica owns only its own node
// (--node-name): its CSI Node server, mounter, unmounter and taint watcher must all run on every
// node at once.
func Run(ctx context.Context, opts *options.Options) error {
	cfg, err := servicecmd.RESTConfig(opts.Kubeconfig, "s3csi-node-agent")
	if err != nil {
		return err
	}
	opts.ApplyRateLimit(cfg)
	svc, err := newService(ctx, opts, cfg)
	if err != nil {
		return err
	}
	return svc.run(ctx)
}

// service holds the node-agent's runnables. It is built before it runs so that tests can
// reach the admin server's bound address when listening on port 0.
type service struct {
	opts    *options.Options
	api     client.Reader
	openapi openapi.Client
	admin   *admin.Server
	pods    *podwatch.Watcher
	server  *csi.Server
	grpc    *csiserver.Server
	cleaner *cleanup.Cleaner
	health  *health.Monitor
	reg     *registration.Server
	taint   *taint.Remover
	// nc, consumer and outbox are nil when events are disabled.
	nc       *nats.Conn
	consumer *events.Consumer
	outbox   *events.Outbox
}

func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	if err := s3csiv2.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	return scheme, nil
}

func newService(ctx context.Context, opts *options.Options, cfg *rest.Config) (*service, error) {
	log := logr.FromContextOrDiscard(ctx)
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	// A direct client: a waiting publish must see what an event announces, not a cache's lag.
	api, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("create API client: %w", err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create discovery client: %w", err)
	}
	pods, err := podwatch.New(cfg, scheme, opts.MountpointNamespace, opts.NodeName, opts.MountpointImage, api, opts.AttachmentRereadPeriod)
	if err != nil {
		return nil, err
	}
	reg := admin.NewRegistry()
	m := metrics.New(reg)
	eventMetrics, err := events.NewOutboxMetrics(reg)
	if err != nil {
		return nil, err
	}
	consumerMetrics, err := events.NewConsumerMetrics(reg)
	if err != nil {
		return nil, err
	}
	waiter := attach.NewWaiter(opts.NodeName, api, opts.AttachmentRereadPeriod, m)
	locks := &keymutex.Mutex{}
	s := &service{opts: opts, api: api, openapi: disco.OpenAPIV3(), admin: admin.New(opts.AdminAddr, reg), pods: pods}
	s.cleaner = cleanup.New(opts.KubeletDir, pods, locks, opts.CleanupPeriod, m)
	pods.Observe(s.cleaner.Observe)
	var sink csi.EventSink
	if opts.NATSURL != "" {
		if err := s.connectEvents(ctx, waiter, m, eventMetrics, consumerMetrics, log); err != nil {
			return nil, err
		}
		sink = s.outbox
	}
	if opts.S3CABundle != "" {
		// Read again at each mount; checked here so that a wrong bundle fails the rollout.
		if _, err := cabundle.ReadFile(opts.S3CABundle); err != nil {
			return nil, fmt.Errorf("--s3-ca-bundle: %w", err)
		}
	}
	s.health = health.New(opts.KubeletDir, opts.NodeName, opts.MountpointNamespace, opts.HealthPeriod, api, sink, m)
	s.server = csi.NewServer(csi.Config{
		NodeName: opts.NodeName, DriverVersion: version.Version, KubeletDir: opts.KubeletDir, MounterUID: mppod.MounterUID,
		MountpointNamespace: opts.MountpointNamespace, DriverCredentials: opts.DriverCredentials,
		Region: opts.S3Region, EndpointURL: opts.S3EndpointURL, PathStyle: opts.S3PathStyle,
		LegacyTokenFile: opts.LegacyTokenFile, Unbound: s.cleaner.Unbound,
		DeadSource: s.health.Report, Replaced: s.health.Replaced, WarnWorkload: s.health.WarnWorkload,
		ResumeWait: opts.ResumeWait, ReplayWait: opts.ReplayWait, CABundleFile: opts.S3CABundle,
	}, waiter, pods, locks, sink, m)
	s.grpc = csi.NewGRPCServer(opts.CSIEndpoint, s.server, log.WithName("csi"), m)
	if opts.RegisterWithKubelet {
		s.reg = registration.New(mppod.DriverName, strings.TrimPrefix(opts.CSIEndpoint, "unix://"),
			filepath.Join(opts.KubeletDir, "plugins_registry"), log.WithName("registration"))
	}
	if opts.RemoveStartupTaint {
		s.taint = taint.New(api, opts.NodeName, mppod.DriverName)
	}
	s.admin.AddReadyCheck(admin.Check{Name: "mountpoint-pods-synced", Fn: func(context.Context) error {
		if !s.server.Ready() {
			return errors.New("the Mountpoint Pod watch has not synced yet")
		}
		return nil
	}})
	return s, nil
}

// connectEvents sets up the consumer of this node's events and the audit publisher. The
// connection retries in the background: NATS being down never stops the node-agent.
func (s *service) connectEvents(ctx context.Context, waiter *attach.Waiter, m *metrics.Metrics,
	eventMetrics *events.OutboxMetrics, consumerMetrics *events.ConsumerMetrics, log logr.Logger,
) error {
	nc, err := events.Connect(ctx, s.opts.NATSURL, "s3csi-node-agent/"+s.opts.NodeName, log.WithName("nats"),
		s.opts.NATSAuth.Options()...)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("open JetStream: %w", err)
	}
	h := &notify.Handler{Node: s.opts.NodeName, Waker: waiter, Unmount: s.cleaner, Counter: m}
	cfg := notify.ConsumerConfig(s.opts.NodeName)
	cfg.Metrics = consumerMetrics
	stream := s.opts.StreamConfig()
	cfg.Stream = &stream
	consumer, err := events.NewConsumer(js, cfg, h.Handle, log.WithName("events"))
	if err != nil {
		nc.Close()
		return err
	}
	s.nc, s.consumer = nc, consumer
	s.outbox = events.OutboxFor(js, events.OutboxOptions{
		Source: notify.Source, Metrics: eventMetrics, Log: log.WithName("events"), Stream: s.opts.StreamConfig(),
	})
	return nil
}

// run starts every runnable under one errgroup: the first to fail cancels the others, and run
// returns only once all have stopped, so no goroutine outlives it.
func (s *service) run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	if err := csi.CheckPropagation(s.opts.KubeletDir, s.opts.KubeletDir); err != nil {
		log.Error(err, "EVERY VOLUME PUBLISH WILL FAIL: mounts made under the kubelet dir do not reach the host",
			"kubeletDir", s.opts.KubeletDir)
	}
	if s.nc != nil {
		defer s.nc.Close()
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.admin.Start(ctx) })
	g.Go(func() error {
		return servicecmd.CheckCRD(ctx, s.api, s.openapi, 10*time.Second, servicecmd.CRDPatience)
	})
	g.Go(func() error { return s.pods.Start(ctx) })
	g.Go(func() error { return s.grpc.Start(ctx) })
	if s.consumer != nil {
		g.Go(func() error { return s.consumer.Start(ctx) })
		g.Go(func() error { return s.outbox.Start(ctx) })
	}
	g.Go(func() error {
		// The cleanup and kubelet registration wait for the pod watch: before it synced,
		// every Mountpoint Pod would look gone.
		if !s.pods.WaitForCacheSync(ctx) {
			return nil
		}
		s.server.SetReady(true)
		log.Info("Mountpoint Pod watch synced; serving")
		sg, sctx := errgroup.WithContext(ctx)
		sg.Go(func() error {
			// The connections of the sources mounted before this process started, kept again
			// for the next mounter (csi.Server.Reattach).
			if n, err := s.server.Reattach(logr.NewContext(sctx, log)); err != nil {
				log.Error(err, "Reattaching the sources mounted before this start failed")
			} else if n > 0 {
				log.Info("Kept the FUSE connections of the sources mounted before this start", "sources", n)
			}
			return nil
		})
		sg.Go(func() error { return s.cleaner.Start(sctx) })
		sg.Go(func() error { return s.health.Start(sctx) })
		if s.reg != nil {
			sg.Go(func() error {
				select {
				case <-s.grpc.Listening():
				case <-sctx.Done():
					return nil
				}
				return s.reg.Start(sctx)
			})
		}
		if s.taint != nil {
			sg.Go(func() error { return s.taint.Start(sctx) })
		}
		return sg.Wait()
	})

	log.Info("Started node-agent", "node", s.opts.NodeName, "events", s.consumer != nil)
	if err := g.Wait(); err != nil {
		return fmt.Errorf("run node-agent: %w", err)
	}
	log.Info("Stopped node-agent")
	return nil
}
