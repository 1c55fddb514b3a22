// Package app wires the pod-reconciler's components together and runs them until shutdown.
package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/s3csi/s3csi/shared/admin"
	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/servicecmd"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/metrics"
	"github.com/s3csi/s3csi/services/pod-reconciler/internal/options"
	"github.com/s3csi/s3csi/services/pod-reconciler/internal/reconciler"
)

// leaderElectionID names the Lease the replicas compete for.
const leaderElectionID = "s3csi-pod-reconciler"

// Run runs the pod-reconciler until ctx is canceled, then stops every component and returns
// nil; it returns an error when a component fails. It logs through the logr.Logger in ctx,
// which main builds from opts.Logging and installs for controller-runtime and client-go too.
//
// Leader election: the controllers and their periodic resync run under the controller-runtime
// manager with leader election (--leader-elect): two active replicas would race to create
// Mountpoint Pods and S3PAs for the same workload. The caches warm up on every replica, and the
// admin endpoint and the event publisher run on every replica, leader or not, so that probes
// and scrapes work on standbys too (a standby publishes nothing: only the leader enqueues).
func Run(ctx context.Context, opts *options.Options) error {
	s, err := newService(ctx, opts)
	if err != nil {
		return err
	}
	return s.run(ctx)
}

// service holds the pod-reconciler's runnables. It is built before it runs so that tests can
// reach the admin server's bound address when listening on port 0.
type service struct {
	opts    *options.Options
	admin   *admin.Server
	mgr     manager.Manager
	metrics *metrics.Metrics
	events  *events.OutboxMetrics
}

func newService(ctx context.Context, opts *options.Options) (*service, error) {
	reg := admin.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		return nil, err
	}
	eventMetrics, err := events.NewOutboxMetrics(reg)
	if err != nil {
		return nil, err
	}
	cfg, err := servicecmd.RESTConfig(opts.Kubeconfig, "s3csi-pod-reconciler")
	if err != nil {
		return nil, err
	}
	// client-go would throttle to 5 requests/s, a few workloads per second. Like
	// controller-runtime's own loader, leave the pacing to the API server's priority and
	// fairness, which every supported Kubernetes version enforces.
	cfg.QPS = -1
	if err := servicecmd.WaitForAPIServer(ctx, cfg, servicecmd.APIServerWait); err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	if err := s3csiv2.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme: scheme,
		Cache:  reconciler.CacheOptions(opts.MountpointNamespace),
		// One /metrics: the admin server serves controller-runtime's registry next to ours.
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Logger:                        logr.FromContextOrDiscard(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("create controller manager: %w", err)
	}
	// It writes attachments: on an outdated CRD (the Scality driver's, before the janitor
	// upgraded it) the API server would drop their readOnly.
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create discovery client: %w", err)
	}
	if err := servicecmd.CheckCRD(ctx, mgr.GetAPIReader(), disco.OpenAPIV3(), 5*time.Second, servicecmd.CRDPatience); err != nil {
		return nil, err
	}
	return &service{opts: opts, admin: admin.New(opts.AdminAddr, reg), mgr: mgr, metrics: m, events: eventMetrics}, nil
}

// run starts every runnable under one errgroup-like group: the first to fail cancels the
// others, and run returns only once all have stopped, so no goroutine outlives it.
func (s *service) run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	queue, closeNATS, err := events.OpenOutbox(ctx, s.opts.NATSURL, leaderElectionID, events.OutboxOptions{
		Size: s.opts.EventQueueSize, Metrics: s.events, Log: log, Connect: s.opts.NATSAuth.Options(),
		Stream: s.opts.StreamConfig(),
	})
	if err != nil {
		return err
	}
	defer closeNATS()
	resources, err := s.opts.MountpointResources()
	if err != nil {
		return err
	}
	wd, err := reconciler.Setup(ctx, s.mgr, reconciler.Config{
		MountpointNamespace: s.opts.MountpointNamespace,
		DriverVersion:       s.opts.DriverVersion,
		Mountpoint: reconciler.MountpointPodConfig{
			Image:              s.opts.MountpointImage,
			ImagePullPolicy:    corev1.PullPolicy(s.opts.MountpointImagePullPolicy),
			ImagePullSecrets:   s.opts.MountpointPullSecrets(),
			PriorityClassName:  s.opts.MountpointPriorityClassName,
			ServiceAccountName: s.opts.MountpointServiceAccountName,
			Resources:          resources,

			TerminationGracePeriod: s.opts.MountpointTerminationGracePeriod,
		},
		MaxConcurrentReconciles: s.opts.MaxConcurrentReconciles,
		ResyncPeriod:            s.opts.ResyncPeriod,
		// controller-runtime refuses a controller name seen before in the process, to keep
		// metric series apart. A process runs one manager, and Setup registers each controller
		// once; the check would only refuse running the service twice in one test binary.
		SkipNameValidation: true,
	}, queue, s.metrics)
	if err != nil {
		return err
	}
	s.admin.AddHealthCheck(admin.Check{Name: "reconcile-progress", Fn: wd.Check(s.opts.StallTimeout)})
	s.admin.AddReadyCheck(admin.Check{Name: "informers-synced", Fn: func(ctx context.Context) error {
		if !s.mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informer caches not synced")
		}
		return nil
	}})

	log.Info("Started pod-reconciler", "leaderElection", s.opts.LeaderElect)
	err = runAll(ctx, s.admin.Start, s.mgr.Start, queue.Start)
	if err != nil {
		return fmt.Errorf("run pod-reconciler: %w", err)
	}
	log.Info("Stopped pod-reconciler")
	return nil
}
