package csi

import (
	"context"
	"os"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mount"
)

// NodeUnpublishVolume implements csi.NodeServer: it removes the target's bind mount and the
// target dir, and leaves the source to the cleanup.
//
// Problem: a target can be missing, never mounted, a dead FUSE bind (ENOTCONN) or the bind of
// a server that does not answer (stopped, stuck), whose stat never returns and which a plain
// unmount refuses (EBUSY) while anything is blocked in it; failing or hanging on any of them
// keeps the pod Terminating forever.
// Solution: the mount table, not stat, decides what to unmount; stat errors are not failures;
// the target is probed with a bounded stat (mount.Check), and a target whose probe timed out is
// detached (the only lazy unmount of the node-agent). The dir is then removed with rmdir, which
// never reaches the detached filesystem.
// Invariant: every call ends, within the probe's timeout plus the unmount, with no mount at the
// target and no target dir, or an error.
func (s *Server) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is missing")
	}
	target := req.GetTargetPath()
	podUID, _, err := parseTarget(s.cfg.KubeletDir, target)
	if err != nil {
		return nil, err
	}
	release, ok := s.inflight.tryAcquire(target)
	if !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on target %s is already in progress", target)
	}
	defer release()
	log := logr.FromContextOrDiscard(ctx).WithValues("volume", req.GetVolumeId(), "pod", podUID)
	s.compatible.forget(target)
	s.stale.forget(target)
	if state, _, err := mount.Check(target); err == nil && state == mount.Hung {
		log.Info("The target's filesystem does not answer; detaching it", "target", target)
		if err := mount.Detach(target); err != nil {
			return nil, status.Errorf(codes.Internal, "%v", err)
		}
	} else if err := mount.Unmount(target); err != nil {
		return nil, status.Errorf(codes.Internal, "%v; the target may be in use", err)
	}
	if err := mount.RemoveDir(target); err != nil && !os.IsNotExist(err) {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	log.Info("Unpublished volume", "target", target)
	if s.cfg.Unbound != nil {
		s.cfg.Unbound()
	}
	s.emit(&eventspb.VolumeUnpublished{Node: s.cfg.NodeName, VolumeId: req.GetVolumeId(), WorkloadPodUid: podUID, TargetPath: target})
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
