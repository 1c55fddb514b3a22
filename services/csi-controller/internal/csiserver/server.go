// Package csiserver holds the csi-controller's CSI Identity service and wires it, with the
// Controller service, onto the shared CSI socket server.
package csiserver

import (
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"

	sharedcsi "github.com/s3csi/s3csi/shared/csiserver"

	"github.com/s3csi/s3csi/services/csi-controller/internal/metrics"
)

// stopTimeout bounds the wait for running RPCs at shutdown; the sidecar retries the rest.
const stopTimeout = 5 * time.Second

// Redacted replaces every secret and volume context value in a logged request.
const Redacted = sharedcsi.Redacted

// New returns the runnable serving identity and controller on endpoint
// (unix:///absolute/path.sock), recording every RPC on m.
func New(endpoint string, identity csi.IdentityServer, controller csi.ControllerServer, m *metrics.Metrics, log logr.Logger) *sharedcsi.Server {
	return sharedcsi.New(sharedcsi.Config{
		Endpoint: endpoint, Name: "CSI", Recorder: m, StopTimeout: stopTimeout, Log: log,
		Register: func(s *grpc.Server) {
			csi.RegisterIdentityServer(s, identity)
			csi.RegisterControllerServer(s, controller)
		},
	})
}
