// Package csiserver serves the csi-controller's CSI services over gRPC on a unix socket, with
// an interceptor that logs sanitized requests and records RPC metrics.
package csiserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/logging"

	"github.com/s3csi/s3csi/services/csi-controller/internal/metrics"
)

const (
	// maxRecvMsgSize bounds a request; CSI requests are a few kilobytes.
	maxRecvMsgSize = 2 << 20
	// stopTimeout bounds the wait for running RPCs at shutdown; the sidecar retries the rest.
	stopTimeout = 5 * time.Second
)

// Server is the CSI gRPC server, a runnable.
type Server struct {
	endpoint   string
	identity   csi.IdentityServer
	controller csi.ControllerServer
	metrics    *metrics.Metrics
	log        logr.Logger

	listening chan struct{}
	mu        sync.Mutex
	serving   bool
}

// New returns a Server for endpoint (unix:///absolute/path.sock).
func New(endpoint string, identity csi.IdentityServer, controller csi.ControllerServer, m *metrics.Metrics, log logr.Logger) *Server {
	return &Server{
		endpoint: endpoint, identity: identity, controller: controller, metrics: m, log: log,
		listening: make(chan struct{}),
	}
}

// Listening is closed once the socket accepts connections.
func (s *Server) Listening() <-chan struct{} {
	return s.listening
}

// Ready is a readiness check: nil while the server serves.
func (s *Server) Ready(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving {
		return errors.New("the CSI server is not serving")
	}
	return nil
}

// Start listens on the socket (replacing a stale one a previous process left), serves until
// ctx is done, then stops within stopTimeout and removes the socket.
func (s *Server) Start(ctx context.Context) error {
	path := strings.TrimPrefix(s.endpoint, "unix://")
	l, err := listen(ctx, path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(s.intercept), grpc.MaxRecvMsgSize(maxRecvMsgSize))
	csi.RegisterIdentityServer(srv, s.identity)
	csi.RegisterControllerServer(srv, s.controller)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	s.setServing(true)
	close(s.listening)
	s.log.Info("Serving CSI", "endpoint", s.endpoint)
	defer func() { _ = os.Remove(path) }()

	select {
	case err := <-served:
		s.setServing(false)
		return fmt.Errorf("serve CSI on %s: %w", s.endpoint, err)
	case <-ctx.Done():
	}
	s.setServing(false)
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(stopTimeout):
		srv.Stop()
		<-stopped
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		s.log.Info("CSI server stopped with an error", "reason", err.Error())
	}
	return nil
}

func (s *Server) setServing(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serving = v
}

// listen removes a stale socket at path and listens there; the socket is only for the
// sidecars of the pod, so it is not world-accessible.
func listen(ctx context.Context, path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("create CSI socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("listen on CSI socket %s: the path exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale CSI socket: %w", err)
		}
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on CSI socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("restrict CSI socket: %w", err)
	}
	return l, nil
}

// intercept logs each RPC with its request sanitized (no secret, no raw volume context) and
// records its code and latency.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	log := s.log.WithValues("method", info.FullMethod)
	log.V(logging.Debug).Info("CSI request", "request", sanitizeAny(req))
	resp, err := handler(logr.NewContext(ctx, log), req)
	code := status.Code(err)
	d := time.Since(start)
	s.metrics.ObserveRPC(info.FullMethod, code, d)
	if err != nil {
		log.Info("CSI request failed", "code", code.String(), "error", err.Error(), "duration", d.String())
		return resp, err
	}
	log.V(logging.Debug).Info("CSI response", "response", sanitizeAny(resp), "duration", d.String())
	return resp, nil
}

func sanitizeAny(v any) string {
	if m, ok := v.(proto.Message); ok {
		return Sanitize(m)
	}
	return fmt.Sprintf("%T", v)
}
