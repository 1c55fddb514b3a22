// Package registration registers the CSI driver with kubelet through the plugin registration
// API, so no node-driver-registrar sidecar is needed: kubelet watches its plugins_registry dir,
// dials the socket found there, asks GetInfo and reports the outcome.
package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// SupportedVersions are the CSI versions the driver speaks.
var SupportedVersions = []string{"1.0.0"}

// Server is a runnable serving the registration socket.
type Server struct {
	registerapi.UnimplementedRegistrationServer

	driver, endpoint, socket string
	registered               atomic.Bool
	log                      logr.Logger
}

// New returns a Server announcing driver at endpoint (the CSI socket path as kubelet sees it),
// listening on <registryDir>/<driver>-reg.sock.
func New(driver, endpoint, registryDir string, log logr.Logger) *Server {
	return &Server{driver: driver, endpoint: endpoint, socket: filepath.Join(registryDir, driver+"-reg.sock"), log: log}
}

// Socket is the registration socket path.
func (s *Server) Socket() string { return s.socket }

// Registered reports whether kubelet confirmed the registration.
func (s *Server) Registered() bool { return s.registered.Load() }

// GetInfo implements registerapi.RegistrationServer.
func (s *Server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: s.driver, Endpoint: s.endpoint, SupportedVersions: SupportedVersions}, nil
}

// NotifyRegistrationStatus implements registerapi.RegistrationServer.
func (s *Server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.registered.Store(st.GetPluginRegistered())
	if st.GetPluginRegistered() {
		s.log.Info("Registered with kubelet", "driver", s.driver)
	} else {
		s.log.Error(errors.New(st.GetError()), "Kubelet refused the registration", "driver", s.driver)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Start serves until ctx ends and removes the socket, so kubelet deregisters the driver.
func (s *Server) Start(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(s.socket), 0o750); err != nil {
		return fmt.Errorf("create registration dir: %w", err)
	}
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale registration socket: %w", err)
	}
	ln, err := net.Listen("unix", s.socket)
	if err != nil {
		return fmt.Errorf("listen on registration socket: %w", err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, s)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve registration: %w", err)
	case <-ctx.Done():
	}
	srv.Stop()
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve registration: %w", err)
	}
	_ = os.Remove(s.socket)
	return nil
}
