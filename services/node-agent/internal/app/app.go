// Package app wires the node-agent's components together and runs them until shutdown.
package app

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"

	"github.com/s3csi/s3csi/shared/admin"

	"github.com/s3csi/s3csi/services/node-agent/internal/options"
)

// Run runs the node-agent until ctx is canceled, then stops every component and returns
// nil; it returns an error when a component fails. It logs through the logr.Logger in ctx,
// which main builds from opts.Logging and installs for controller-runtime and client-go too.
//
// Leader election: never. The node-agent is a DaemonSet and each replica owns only its own node
// (--node-name): its CSI Node server, mounter, unmounter and taint watcher must all run on every
// node at once.
func Run(ctx context.Context, opts *options.Options) error {
	return newService(opts).run(ctx)
}

// service holds the node-agent's runnables. It is built before it runs so that tests can
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
	// Still to come: the CSI Identity and Node gRPC server, the pod mounter, the
	// unmount sweep, the taint watcher and the event subscriber for this node's subjects.

	log.Info("Started node-agent")
	if err := g.Wait(); err != nil {
		return fmt.Errorf("run node-agent: %w", err)
	}
	log.Info("Stopped node-agent")
	return nil
}
