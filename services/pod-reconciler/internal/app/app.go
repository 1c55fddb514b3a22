// Package app wires the pod-reconciler's components together and runs them until shutdown.
package app

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"

	"github.com/s3csi/s3csi/shared/admin"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/options"
)

// Run runs the pod-reconciler until ctx is canceled, then stops every component and returns
// nil; it returns an error when a component fails. It logs through the logr.Logger in ctx,
// which main builds from opts.Logging and installs for controller-runtime and client-go too.
//
// Leader election: required for the reconcile loop that watches workload pods and creates
// Mountpoint Pods and S3PAs. Two active replicas would race to create them for the same
// (pod, volume) and publish duplicate events; the loop will run under the controller-runtime
// manager with leader election on (--leader-elect). The admin endpoint runs on every replica,
// leader or not, so that probes and scrapes work on standbys too.
func Run(ctx context.Context, opts *options.Options) error {
	return newService(opts).run(ctx)
}

// service holds the pod-reconciler's runnables. It is built before it runs so that tests can
// reach the admin server's bound address when listening on port 0.
type service struct {
	admin *admin.Server
}

func newService(opts *options.Options) *service {
	reg := admin.NewRegistry()
	return &service{admin: admin.New(opts.AdminAddr, reg)}
}

// run starts every runnable under one errgroup: the first to fail cancels the others, and run
// returns only once all have stopped, so no goroutine outlives it.
func (s *service) run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.admin.Start(ctx) })
	// Still to come: the controller-runtime manager (leader-elected) running the
	// workload-pod reconciler, and the event publisher (workload.scheduled.v1,
	// attachment.assigned.v1, mountpoint.needs-unmount.v1).

	log.Info("Started pod-reconciler")
	if err := g.Wait(); err != nil {
		return fmt.Errorf("run pod-reconciler: %w", err)
	}
	log.Info("Stopped pod-reconciler")
	return nil
}
