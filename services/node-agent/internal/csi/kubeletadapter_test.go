package csi_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/volumecontext"
)

// kubeletAdapter stands, for csi-sanity, where kubelet and the pod-reconciler stand in a
// cluster: it serves the CSI Identity and Node services on its own socket and forwards every
// call to the node-agent's real server, translating what sanity sends into what kubelet sends.
//
// Problem: sanity publishes to <TargetPath>/target, and the node service refuses every target
// that does not have the kubelet's shape <kubelet>/pods/<pod UID>/volumes/kubernetes.io~csi/<PV>/mount
// (it is what keeps a caller of the socket from bind-mounting a bucket anywhere on the host).
// The node service also mounts only for a workload that a MountpointS3PodAttachment assigns to
// a Running Mountpoint Pod, which the pod-reconciler and kubelet make before kubelet publishes.
// Solution: per volume id the adapter makes up a PV name, and per sanity path of that volume a
// workload pod UID; the sanity path becomes that pod's kubelet target (its parent made as
// kubelet makes it) and the pod's podInfoOnMount keys join the volume context. Before the
// first publish of a provisioned volume (its context names a bucket) it creates a Mountpoint
// Pod set Running with a real mounter process and an attachment assigning the workload; a
// second sanity path adds its workload to that attachment. After an unpublish it removes the
// PV dir as kubelet does, which fails when the node service left the target behind.
// GetPluginCapabilities answers with the union of the node's and the controller's, as the
// deployed driver (csi-controller Deployment plus node-agent DaemonSet) presents itself.
// Invariant: every request reaching the node service is one kubelet could send; the adapter
// never answers a Node call itself, and its own failures are collected in errs.
type kubeletAdapter struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer

	n *node
	// identities are the node's Identity service, then the controller's.
	identities []csipb.IdentityClient

	mu      sync.Mutex
	volumes map[string]*adaptedVolume
	// latest is the kubelet target a sanity path was last translated to, for checkPath.
	latest map[string]string
	errs   []error
}

// adaptedVolume is what the adapter made up for one volume id.
type adaptedVolume struct {
	pv string
	// workloads holds the made-up workload pod of each sanity path.
	workloads map[string]types.UID
	// mountpointPod and attachment are set once the volume was first published.
	mountpointPod string
	attachment    *s3csiv2.MountpointS3PodAttachment
	attached      map[types.UID]bool
}

// startKubeletAdapter serves an adapter for n on socket until the test ends.
func startKubeletAdapter(t *testing.T, n *node, socket string, controllerIdentity csipb.IdentityClient) *kubeletAdapter {
	t.Helper()
	a := &kubeletAdapter{
		n: n, identities: []csipb.IdentityClient{n.identity, controllerIdentity},
		volumes: map[string]*adaptedVolume{}, latest: map[string]string{},
	}
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csipb.RegisterIdentityServer(srv, a)
	csipb.RegisterNodeServer(srv, a)
	done := make(chan struct{})
	go func() {
		_ = srv.Serve(l)
		close(done)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return a
}

// failures returns the adapter's own errors.
func (a *kubeletAdapter) failures() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}

func (a *kubeletAdapter) fail(err error) error {
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
	return status.Errorf(codes.Internal, "kubelet adapter: %v", err)
}

// workload translates sanity's path for volumeID into the kubelet target of a made-up workload.
func (a *kubeletAdapter) workload(volumeID, path string) (*adaptedVolume, types.UID, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.volumes[volumeID]
	if v == nil {
		v = &adaptedVolume{pv: fmt.Sprintf("pv-sanity-%d", len(a.volumes)+1), workloads: map[string]types.UID{}}
		a.volumes[volumeID] = v
	}
	uid, ok := v.workloads[path]
	if !ok {
		uid = uuid.NewUUID()
		v.workloads[path] = uid
	}
	target := a.n.kubelet.TargetPath(string(uid), v.pv)
	a.latest[path] = target
	return v, uid, target
}

// attach does what the pod-reconciler does for a workload of a provisioned volume: the first
// workload gets a Running Mountpoint Pod and an attachment whose sharing key is the request's,
// later ones are added to that attachment.
func (a *kubeletAdapter) attach(ctx context.Context, v *adaptedVolume, uid types.UID, req *csipb.NodePublishVolumeRequest) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v.attachment == nil {
		name := mppod.Name(string(uid), v.pv)
		if _, err := a.n.startMountpointPod(ctx, name); err != nil {
			return err
		}
		key := func(s *s3csiv2.MountpointS3PodAttachmentSpec) {
			s.MountOptions = strings.Join(req.GetVolumeCapability().GetMount().GetMountFlags(), ",")
			s.WorkloadFSGroup = req.GetVolumeCapability().GetMount().GetVolumeMountGroup()
			s.AuthenticationSource = req.GetVolumeContext()[volumecontext.KeyAuthenticationSource]
			s.ReadOnly = req.GetReadonly()
		}
		s3pa, err := a.n.createAttachment(ctx, v.pv, req.GetVolumeId(), string(uid), name, key)
		if err != nil {
			return err
		}
		v.mountpointPod, v.attachment, v.attached = name, s3pa, map[types.UID]bool{uid: true}
		return nil
	}
	if v.attached[uid] {
		return nil
	}
	if err := a.n.attachWorkload(ctx, v.attachment, v.mountpointPod, string(uid)); err != nil {
		return err
	}
	v.attached[uid] = true
	return nil
}

// NodePublishVolume translates the target, plays the pod-reconciler for a provisioned volume,
// and forwards.
func (a *kubeletAdapter) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if req.GetTargetPath() == "" {
		return a.n.client.NodePublishVolume(ctx, req)
	}
	v, uid, target := a.workload(req.GetVolumeId(), req.GetTargetPath())
	if req.GetVolumeContext()[volumecontext.KeyBucketName] != "" && req.GetVolumeCapability() != nil {
		if err := a.attach(ctx, v, uid, req); err != nil {
			return nil, a.fail(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return nil, a.fail(fmt.Errorf("create the pod's volume dir: %w", err))
	}
	fwd := proto.CloneOf(req)
	fwd.TargetPath = target
	fwd.VolumeContext = maps.Clone(req.GetVolumeContext())
	if fwd.VolumeContext == nil {
		fwd.VolumeContext = map[string]string{}
	}
	// The keys kubelet adds when the CSIDriver object sets podInfoOnMount.
	fwd.VolumeContext[volumecontext.KeyPodName] = "sanity-" + string(uid)[:8]
	fwd.VolumeContext[volumecontext.KeyPodNamespace] = "default"
	fwd.VolumeContext[volumecontext.KeyPodUID] = string(uid)
	fwd.VolumeContext[volumecontext.KeyServiceAccountName] = "default"
	fwd.VolumeContext[volumecontext.KeyEphemeral] = "false"
	return a.n.client.NodePublishVolume(ctx, fwd)
}

// NodeUnpublishVolume translates the target and forwards; after a success it removes the PV
// dir as kubelet does, which fails when the target is still there.
func (a *kubeletAdapter) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if req.GetTargetPath() == "" {
		return a.n.client.NodeUnpublishVolume(ctx, req)
	}
	_, _, target := a.workload(req.GetVolumeId(), req.GetTargetPath())
	fwd := proto.CloneOf(req)
	fwd.TargetPath = target
	rsp, err := a.n.client.NodeUnpublishVolume(ctx, fwd)
	if err != nil {
		return rsp, err
	}
	if err := os.Remove(filepath.Dir(target)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, a.fail(fmt.Errorf("remove the pod's volume dir after NodeUnpublishVolume: %w", err))
	}
	return rsp, nil
}

// NodeGetVolumeStats translates the volume path as NodeUnpublishVolume does and forwards.
func (a *kubeletAdapter) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return a.n.client.NodeGetVolumeStats(ctx, req)
	}
	_, _, target := a.workload(req.GetVolumeId(), req.GetVolumePath())
	fwd := proto.CloneOf(req)
	fwd.VolumePath = target
	return a.n.client.NodeGetVolumeStats(ctx, fwd)
}

// checkPath is sanity's CheckPath: it looks at the kubelet target that path stands for.
func (a *kubeletAdapter) checkPath(path string) (sanity.PathKind, error) {
	a.mu.Lock()
	target, ok := a.latest[path]
	a.mu.Unlock()
	if !ok {
		target = path
	}
	fi, err := os.Stat(target)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return sanity.PathIsNotFound, nil
	case err != nil:
		return "", err
	case fi.Mode().IsRegular():
		return sanity.PathIsFile, nil
	case fi.IsDir():
		return sanity.PathIsDir, nil
	}
	return sanity.PathIsOther, nil
}

// GetPluginCapabilities is the union of the node's and the controller's capabilities.
func (a *kubeletAdapter) GetPluginCapabilities(ctx context.Context, req *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	union := &csipb.GetPluginCapabilitiesResponse{}
	for _, id := range a.identities {
		rsp, err := id.GetPluginCapabilities(ctx, req)
		if err != nil {
			return nil, err
		}
	caps:
		for _, c := range rsp.GetCapabilities() {
			for _, have := range union.Capabilities {
				if proto.Equal(have, c) {
					continue caps
				}
			}
			union.Capabilities = append(union.Capabilities, c)
		}
	}
	return union, nil
}

// The other calls are forwarded as they are.

func (a *kubeletAdapter) GetPluginInfo(ctx context.Context, req *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return a.n.identity.GetPluginInfo(ctx, req)
}

func (a *kubeletAdapter) Probe(ctx context.Context, req *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return a.n.identity.Probe(ctx, req)
}

func (a *kubeletAdapter) NodeGetCapabilities(ctx context.Context, req *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return a.n.client.NodeGetCapabilities(ctx, req)
}

func (a *kubeletAdapter) NodeGetInfo(ctx context.Context, req *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return a.n.client.NodeGetInfo(ctx, req)
}

func (a *kubeletAdapter) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	return a.n.client.NodeStageVolume(ctx, req)
}

func (a *kubeletAdapter) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	return a.n.client.NodeUnstageVolume(ctx, req)
}

func (a *kubeletAdapter) NodeExpandVolume(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	return a.n.client.NodeExpandVolume(ctx, req)
}
