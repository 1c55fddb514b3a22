// Package app wires the janitor's components together and runs them until shutdown.
package app

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"

	"github.com/s3csi/s3csi/shared/admin"

	"github.com/s3csi/s3csi/services/janitor/internal/options"
)

// Run runs the janitor until ctx is canceled, then stops every component and returns
// nil; it returns an error when a component fails. It logs through the logr.Logger in ctx,
// which main builds from opts.Logging and installs for controller-runtime and client-go too.
//
// Leader election: required for every cleanup loop (stale attachments, orphan Mountpoint Pods,
// leaks). Two active replicas could both decide the same object is stale and one could delete
// what the other just saw reused; the loops will run only on the leader (--leader-elect). The
// admin endpoint runs on every replica, leader or not, so that probes and scrapes work on
// standbys too.
func Run(ctx context.Context, opts *options.Options) error {
	return newService(opts).run(ctx)
}

// service holds the janitor's runnables. It is built before it runs so that tests can
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
	// Still to come: the leader-elected sweeps (stale attachments, orphan Mountpoint
	// Pods, leaks), each with its own interval and a wake-up on relevant events, and the event
	// publisher (attachment.cleaned.v1, mountpoint.needs-unmount.v1).

	log.Info("Started janitor")
	if err := g.Wait(); err != nil {
		return fmt.Errorf("run janitor: %w", err)
	}
	log.Info("Stopped janitor")
	return nil
}
