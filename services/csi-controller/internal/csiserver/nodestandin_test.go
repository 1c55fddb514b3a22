package csiserver_test

import (
	"context"
	"net"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// nodeStandIn is the endpoint csi-sanity uses for the Identity and Node services.
//
// Problem: csi-sanity's cleanup after every Controller spec asks the Node service for its
// capabilities, and the csi-controller serves no Node service (the node-agent does).
// Solution: this test-only endpoint answers NodeGetCapabilities with none and NodeUnpublishVolume
// with success (the Controller specs never publish, so there is nothing to unpublish), and forwards every Identity call to the
// real server, so the Identity specs still exercise the csi-controller.
// Invariant: every Controller call goes to the real server (sanity's ControllerAddress).
type nodeStandIn struct {
	csi.UnimplementedNodeServer
	csi.UnimplementedIdentityServer
	identity csi.IdentityClient
}

func (n *nodeStandIn) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func (n *nodeStandIn) NodeUnpublishVolume(context.Context, *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (n *nodeStandIn) GetPluginInfo(ctx context.Context, req *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return n.identity.GetPluginInfo(ctx, req)
}

func (n *nodeStandIn) GetPluginCapabilities(ctx context.Context, req *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return n.identity.GetPluginCapabilities(ctx, req)
}

func (n *nodeStandIn) Probe(ctx context.Context, req *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return n.identity.Probe(ctx, req)
}

// startNodeStandIn serves a nodeStandIn on socket, forwarding Identity calls over server.
func startNodeStandIn(t *testing.T, socket string, server *grpc.ClientConn) func() {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	standIn := &nodeStandIn{identity: csi.NewIdentityClient(server)}
	csi.RegisterNodeServer(srv, standIn)
	csi.RegisterIdentityServer(srv, standIn)
	done := make(chan struct{})
	go func() {
		_ = srv.Serve(l)
		close(done)
	}()
	return func() {
		srv.Stop()
		<-done
	}
}
