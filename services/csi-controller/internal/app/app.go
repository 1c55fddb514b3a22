// Package app wires the csi-controller's components together and runs them until shutdown.
package app

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"

	"github.com/s3csi/s3csi/shared/admin"

	"github.com/s3csi/s3csi/services/csi-controller/internal/options"
)

// Run runs the csi-controller until ctx is canceled, then stops every component and returns
// nil; it returns an error when a component fails. It logs through the logr.Logger in ctx,
// which main builds from opts.Logging and installs for controller-runtime and client-go too.
//
// Leader election: none. CreateVolume and DeleteVolume are driven by the external-provisioner
// sidecar, which elects its own leader, so every replica may serve the CSI Controller service.
func Run(ctx context.Context, opts *options.Options) error {
	return newService(opts).run(ctx)
}

// service holds the csi-controller's runnables. It is built before it runs so that tests can
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
	// Still to come: the CSI Identity and Controller gRPC server and the event
	// publisher (volume.created.v1, volume.deleted.v1).

	log.Info("Started csi-controller")
	if err := g.Wait(); err != nil {
		return fmt.Errorf("run csi-controller: %w", err)
	}
	log.Info("Stopped csi-controller")
	return nil
}
