package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
)

// gracefulStop bounds the wait for in-flight calls at shutdown; kubelet retries the rest.
const gracefulStop = 10 * time.Second

// GRPCServer serves a Server on a unix socket; it is a runnable.
type GRPCServer struct {
	path      string
	srv       *grpc.Server
	listening chan struct{}
}

// NewGRPCServer returns a runnable serving s on endpoint (unix:///path) with the logging
// interceptor.
func NewGRPCServer(endpoint string, s *Server, log logr.Logger, rec RPCRecorder) *GRPCServer {
	srv := grpc.NewServer(grpc.UnaryInterceptor(LoggingInterceptor(log, rec)))
	csi.RegisterIdentityServer(srv, s)
	csi.RegisterNodeServer(srv, s)
	return &GRPCServer{path: strings.TrimPrefix(endpoint, "unix://"), srv: srv, listening: make(chan struct{})}
}

// Listening is closed once the socket accepts connections.
func (g *GRPCServer) Listening() <-chan struct{} { return g.listening }

// Path is the socket path.
func (g *GRPCServer) Path() string { return g.path }

// Start serves until ctx ends, then stops gracefully (bounded) and removes the socket.
func (g *GRPCServer) Start(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(g.path), 0o750); err != nil {
		return fmt.Errorf("create CSI socket dir: %w", err)
	}
	if err := os.Remove(g.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale CSI socket: %w", err)
	}
	ln, err := net.Listen("unix", g.path)
	if err != nil {
		return fmt.Errorf("listen on CSI socket: %w", err)
	}
	close(g.listening)
	errc := make(chan error, 1)
	go func() { errc <- g.srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve CSI: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		g.srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(gracefulStop):
		g.srv.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve CSI: %w", err)
	}
	if err := os.Remove(g.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CSI socket: %w", err)
	}
	return nil
}
