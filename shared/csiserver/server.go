// Package csiserver serves gRPC services on a unix socket for the CSI sidecars and kubelet:
// the csi-controller's Identity and Controller services, the node-agent's Identity and Node
// services, and the node-agent's kubelet plugin registration. Every RPC goes through one
// interceptor that logs the request sanitized (see Sanitize) and records its outcome.
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

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
)

const (
	// maxRecvMsgSize bounds a request; CSI and registration requests are a few kilobytes.
	maxRecvMsgSize = 2 << 20
	// defaultStopTimeout bounds the wait for running RPCs at shutdown when Config leaves it zero.
	defaultStopTimeout = 5 * time.Second
)

// Config describes one socket server.
type Config struct {
	// Endpoint is where to listen: unix:///absolute/path.sock, or the bare path.
	Endpoint string
	// Name names the server in log lines and errors, e.g. "CSI" or "registration".
	Name string
	// Register registers the gRPC services on the server before it serves.
	Register func(*grpc.Server)
	// Recorder records every RPC's code and latency; nil records nothing.
	Recorder RPCRecorder
	// StopTimeout bounds the graceful stop at shutdown; past it running RPCs are cut (the
	// caller, a sidecar or kubelet, retries them). Zero means 5s.
	StopTimeout time.Duration
	// Log receives one line per failed RPC and, at Debug, every sanitized request and response.
	Log logr.Logger
}

// Server serves Config.Register's services on a unix socket; it is a runnable.
type Server struct {
	cfg       Config
	path      string
	listening chan struct{}

	mu      sync.Mutex
	serving bool
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = defaultStopTimeout
	}
	if cfg.Name == "" {
		cfg.Name = "gRPC"
	}
	return &Server{cfg: cfg, path: strings.TrimPrefix(cfg.Endpoint, "unix://"), listening: make(chan struct{})}
}

// Path is the socket path.
func (s *Server) Path() string { return s.path }

// Listening is closed once the socket accepts connections.
func (s *Server) Listening() <-chan struct{} { return s.listening }

// Ready is a readiness check: nil while the server serves.
func (s *Server) Ready(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.serving {
		return fmt.Errorf("the %s server is not serving", s.cfg.Name)
	}
	return nil
}

// Start listens on the socket (replacing a stale one a previous process left), serves until
// ctx is done, then stops within Config.StopTimeout and removes the socket, so kubelet sees a
// registration socket disappear with the process.
func (s *Server) Start(ctx context.Context) error {
	l, err := s.listen(ctx)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(Interceptor(s.cfg.Log, s.cfg.Recorder)),
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
	)
	if s.cfg.Register != nil {
		s.cfg.Register(srv)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	s.setServing(true)
	close(s.listening)
	s.cfg.Log.Info("Serving", "server", s.cfg.Name, "socket", s.path)
	defer func() { _ = os.Remove(s.path) }()

	select {
	case err := <-served:
		s.setServing(false)
		return fmt.Errorf("serve %s on %s: %w", s.cfg.Name, s.path, err)
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
	case <-time.After(s.cfg.StopTimeout):
		srv.Stop()
		<-stopped
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve %s on %s: %w", s.cfg.Name, s.path, err)
	}
	return nil
}

func (s *Server) setServing(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serving = v
}

// listen removes a stale socket at the path and listens there. It refuses to remove anything
// but a socket, so a wrong endpoint never deletes a file. The socket is for the sidecars of
// the pod and kubelet, both root or in the pod, so it is not world-accessible.
func (s *Server) listen(ctx context.Context) (net.Listener, error) {
	if s.path == "" || !filepath.IsAbs(s.path) {
		return nil, fmt.Errorf("listen on %s socket: %q is not unix:///absolute/path", s.cfg.Name, s.cfg.Endpoint)
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o750); err != nil {
		return nil, fmt.Errorf("create %s socket directory: %w", s.cfg.Name, err)
	}
	if fi, err := os.Lstat(s.path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("listen on %s socket %s: the path exists and is not a socket", s.cfg.Name, s.path)
		}
		if err := os.Remove(s.path); err != nil {
			return nil, fmt.Errorf("remove stale %s socket: %w", s.cfg.Name, err)
		}
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", s.path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s socket %s: %w", s.cfg.Name, s.path, err)
	}
	if err := os.Chmod(s.path, 0o660); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("restrict %s socket: %w", s.cfg.Name, err)
	}
	return l, nil
}
