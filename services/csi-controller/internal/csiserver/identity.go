package csiserver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/s3csi/s3csi/shared/mppod"
)

// Identity is the CSI Identity service of the csi-controller.
type Identity struct {
	csi.UnimplementedIdentityServer
	version string
}

// NewIdentity returns the Identity service reporting version.
func NewIdentity(version string) *Identity {
	return &Identity{version: version}
}

// GetPluginInfo returns the driver name every PV and StorageClass of s3csi names.
func (i *Identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: mppod.DriverName, VendorVersion: i.version}, nil
}

// GetPluginCapabilities advertises the Controller service.
func (i *Identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
		}},
	}}}, nil
}

// Probe reports ready: the server answers only once it serves, and S3 reachability is a
// per-request matter (each request may use other credentials), reported on /readyz.
func (i *Identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
