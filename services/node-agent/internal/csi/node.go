// Package csi serves the CSI Identity and Node services of the node-agent: NodePublishVolume
// mounts a Mountpoint Pod's filesystem on a source dir (once per Mountpoint Pod) and
// bind-mounts it into each workload's target; NodeUnpublishVolume removes the bind only.
package csi

import (
	"context"
	"sync/atomic"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/keymutex"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/node-agent/internal/attach"
	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
	"github.com/s3csi/s3csi/services/node-agent/internal/metrics"
	"github.com/s3csi/s3csi/services/node-agent/internal/source"
)

// AttachmentWaiter finds the Mountpoint Pod assigned to a workload's volume.
type AttachmentWaiter interface {
	// Wait returns the assignment of key with the given volume id once the API server records
	// it, or an error when ctx ends first.
	Wait(ctx context.Context, key attach.Key, volumeID string) (*attach.Assignment, error)
	// Find reads the API server once and returns the assignment of key with the given volume id
	// (any volume id when ""), nil when no attachment records it.
	Find(ctx context.Context, key attach.Key, volumeID string) (*attach.Assignment, error)
}

// PodWaiter reads this node's Mountpoint Pods.
type PodWaiter interface {
	// WaitRunning returns the named Mountpoint Pod once Running; it waits for a pod not yet
	// created, and fails for one that finished.
	WaitRunning(ctx context.Context, name string) (*corev1.Pod, error)
	// WaitServing returns the named Mountpoint Pod once Running, not terminating and not the
	// pod of UID except; it waits past one that is terminating or finished, for the pod that
	// replaces it.
	WaitServing(ctx context.Context, name string, except types.UID) (*corev1.Pod, error)
	// Get returns the named pod, nil when it does not exist.
	Get(ctx context.Context, name string) (*corev1.Pod, error)
}

// EventSink publishes an audit event after the fact it describes; *events.Outbox is one.
// Notify never blocks and never fails: NATS being down must not slow a mount. An empty id
// gets a random one (each publish or unpublish is a fact of its own).
type EventSink interface {
	Notify(id string, payload proto.Message)
}

// Config is the node service's configuration.
type Config struct {
	// NodeName is this node; DriverVersion is reported by GetPluginInfo.
	NodeName, DriverVersion string
	// KubeletDir is the kubelet root dir as this process sees it.
	KubeletDir string
	// MountpointNamespace is the namespace of Mountpoint Pods, for messages.
	MountpointNamespace string
	// DriverCredentials are used for volumes with authenticationSource "driver" (or none).
	DriverCredentials credentials.Static
	// Region and EndpointURL configure the S3 client of every Mountpoint Pod.
	Region, EndpointURL string
	// CABundleFile, when set, is a PEM file of CAs the S3 client of every Mountpoint Pod trusts
	// in addition to the system roots; read and checked at each mount (a ConfigMap volume
	// updates it in place) and sent in the mount request.
	CABundleFile string
	// PathStyle addresses buckets as <endpoint>/<bucket> in every Mountpoint Pod, as
	// on-premises S3 (Scality RING) needs; a volume may also ask for it with --force-path-style.
	PathStyle bool
	// LegacyTokenFile is the driver's web identity token file; when set, it is copied to where
	// mount-s3 processes of the v1 (systemd) mounter read it whenever such a mount is
	// republished.
	LegacyTokenFile string
	// MounterUID is the uid Mountpoint Pods run as (mppod.MounterUID); a mount.sock served by a
	// process of another uid is refused before the FUSE fd or anything else is sent.
	MounterUID int
	// Unbound, when set, is called after every target NodeUnpublishVolume removed, so that a
	// source waiting for its last bind to go is cleaned at once (cleanup.Cleaner.Unbound).
	Unbound func()
	// DeadSource, when set, is called before a dead source is mounted again, with the
	// Mountpoint Pod and the workload pod (if any) whose first publish this is: its workloads
	// still hold the dead mount and must be told (health.Monitor.Report).
	DeadSource func(ctx context.Context, mountpointPod, exceptPodUID string)
	// ResumeWait is how long the FUSE connection of a source whose mounter ended waits for the
	// next mounter to receive it (handshake.Kept); zero means handshake.DefaultResumeWait.
	ResumeWait time.Duration
	// ReplayWait is how long that mounter may take to answer (handshake.KeepOptions); zero means
	// handshake.DefaultReplayWait.
	ReplayWait time.Duration
	// Replaced, when set, is called when the mounter of a Mountpoint Pod ended and the next one
	// took its mount over (health.Monitor.Replaced).
	Replaced func(ctx context.Context, mountpointPod string, r handshake.Resumption)
	// WarnWorkload, when set, records a Warning Event with reason and message on a workload pod
	// (health.Monitor.WarnWorkload): after a workload's first publish, which of its volume's
	// mount options the policy ignored or changed (warnOptions).
	WarnWorkload func(ctx context.Context, pod types.NamespacedName, uid types.UID, reason, message string)
}

// Server implements csi.IdentityServer and csi.NodeServer.
type Server struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	cfg      Config
	attach   AttachmentWaiter
	pods     PodWaiter
	events   EventSink
	metrics  *metrics.Metrics
	inflight *inflight
	// compatible spares kubelet's periodic republish an API read (checkRepublish).
	compatible compatibleTargets
	// stale are the targets whose containers hold a dead mount (NodeGetVolumeStats).
	stale staleTargets
	// sources keeps custody of the mounted sources.
	sources *source.Sources
	mpLocks *keymutex.Mutex
	ready   atomic.Bool
}

// NewServer returns a Server; mpLocks is shared with the source cleanup so that a cleanup and
// a mount of one Mountpoint Pod never overlap. events and m may be nil.
func NewServer(cfg Config, aw AttachmentWaiter, pods PodWaiter, mpLocks *keymutex.Mutex, events EventSink, m *metrics.Metrics) *Server {
	sources := source.New(source.Config{
		KubeletDir: cfg.KubeletDir, MounterUID: cfg.MounterUID, DriverProfiles: credentials.Render(cfg.DriverCredentials, cfg.Region),
		ResumeWait: cfg.ResumeWait, ReplayWait: cfg.ReplayWait, Replaced: cfg.Replaced,
	}, pods, mpLocks)
	return &Server{cfg: cfg, attach: aw, pods: pods, events: events, metrics: m,
		inflight: newInflight(), mpLocks: mpLocks, sources: sources}
}

// Reattach keeps again the FUSE connections of the sources mounted before this process started
// (source.Sources.Reattach) and returns how many it keeps.
func (s *Server) Reattach(ctx context.Context) (int, error) { return s.sources.Reattach(ctx) }

// SetReady makes Probe report ready: the caches it depends on have synced.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// Ready reports whether SetReady(true) was called.
func (s *Server) Ready() bool { return s.ready.Load() }

// GetPluginInfo implements csi.IdentityServer.
func (s *Server) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: mppod.DriverName, VendorVersion: s.cfg.DriverVersion}, nil
}

// GetPluginCapabilities implements csi.IdentityServer: the node plugin has no controller.
func (s *Server) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

// Probe implements csi.IdentityServer.
func (s *Server) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(s.ready.Load())}, nil
}

// NodeGetCapabilities implements csi.NodeServer: VOLUME_MOUNT_GROUP, so kubelet passes the
// workload's fsGroup instead of changing ownership of every object; GET_VOLUME_STATS and
// VOLUME_CONDITION, so kubelet learns when a volume's filesystem is dead or silent
// (NodeGetVolumeStats).
func (s *Server) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	rsp := &csi.NodeGetCapabilitiesResponse{}
	for _, c := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		capVolumeCondition,
	} {
		rsp.Capabilities = append(rsp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}},
		})
	}
	return rsp, nil
}

// NodeGetInfo implements csi.NodeServer.
func (s *Server) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.cfg.NodeName}, nil
}

// NodeStageVolume is not supported (no STAGE_UNSTAGE_VOLUME capability); arguments are still
// checked first, as csi-sanity expects.
func (s *Server) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume id, staging target path and capability are required")
	}
	return nil, status.Error(codes.Unimplemented, "NodeStageVolume is not supported")
}

// NodeUnstageVolume is not supported.
func (s *Server) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and staging target path are required")
	}
	return nil, status.Error(codes.Unimplemented, "NodeUnstageVolume is not supported")
}
