package csi

import (
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"

	"github.com/s3csi/s3csi/shared/csiserver"
)

// gracefulStop bounds the wait for in-flight calls at shutdown; kubelet retries the rest.
const gracefulStop = 10 * time.Second

// NewGRPCServer returns the runnable serving s's Identity and Node services on endpoint
// (unix:///path), recording every RPC on rec (nil records nothing).
func NewGRPCServer(endpoint string, s *Server, log logr.Logger, rec csiserver.RPCRecorder) *csiserver.Server {
	return csiserver.New(csiserver.Config{
		Endpoint: endpoint, Name: "CSI", Recorder: rec, StopTimeout: gracefulStop, Log: log,
		Register: func(g *grpc.Server) {
			csi.RegisterIdentityServer(g, s)
			csi.RegisterNodeServer(g, s)
		},
	})
}
