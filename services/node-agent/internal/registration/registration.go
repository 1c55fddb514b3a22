// Package registration registers the CSI driver with kubelet through the plugin registration
// API, so no node-driver-registrar sidecar is needed: kubelet watches its plugins_registry dir,
// dials the socket found there, asks GetInfo and reports the outcome.
package registration

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/s3csi/s3csi/shared/csiserver"
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
	return csiserver.New(csiserver.Config{
		Endpoint: s.socket, Name: "registration", Log: s.log,
		Register: func(g *grpc.Server) { registerapi.RegisterRegistrationServer(g, s) },
	}).Start(ctx)
}
