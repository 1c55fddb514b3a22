package csi

import (
	"context"
	"math"
	"path/filepath"
	"sync"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/mount"

	"github.com/s3csi/s3csi/services/node-agent/internal/source"
)

// NodeGetVolumeStats implements csi.NodeServer: the condition of the mount at the volume path
// and the usage its filesystem reports (a bucket has no capacity: s3fs reports a huge, empty
// filesystem, and inodes likewise).
//
// Problem: kubelet asks every minute per volume, and a FUSE server that is stopped never answers
// a statfs; a call that waits for it holds one of kubelet's stats workers and says nothing.
// Solution: the target is probed with a bounded stat (mount.Check) and the usage is read with a
// bounded statfs (mount.Statfs); a dead or silent filesystem is answered at once as an abnormal
// VOLUME_CONDITION whose message names the Mountpoint Pod and the log to read, with zero usage
// (kubelet refuses an answer without usage when its CSIVolumeHealth gate is off).
// Invariant: NodeGetVolumeStats returns within twice mount.ProbeTimeout, never mounts or
// unmounts anything, and answers NOT_FOUND for any path that is not this driver's live or dead
// mount at a kubelet target.
func (s *Server) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is missing")
	}
	path := req.GetVolumePath()
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "volume path is missing")
	}
	if _, _, err := parseTarget(s.cfg.KubeletDir, path); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s: %s", req.GetVolumeId(), path, status.Convert(err).Message())
	}
	state, entry, err := mount.Check(path)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "check %s: %v", path, err)
	}
	if msg, ok := s.stale.get(path); ok && state != mount.Missing && state != mount.NotMounted {
		return abnormal(msg), nil
	}
	switch state {
	case mount.Missing, mount.NotMounted:
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s: nothing is mounted there", req.GetVolumeId(), path)
	case mount.Corrupted:
		return abnormal(source.DeadMessage(s.cfg.MountpointNamespace, s.mountpointPodOf(entry), "")), nil
	case mount.Hung:
		return abnormal(source.HungMessage(s.cfg.MountpointNamespace, s.mountpointPodOf(entry))), nil
	}
	if !mount.IsFUSE(entry) || entry.Source != mount.FUSESource {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s: it holds a mount that is not from this driver (%s)", req.GetVolumeId(), path, entry.FsType)
	}
	st, err := mount.Statfs(path, mount.ProbeTimeout)
	if err != nil {
		return abnormal(source.HungMessage(s.cfg.MountpointNamespace, s.mountpointPodOf(entry))), nil
	}
	bsize := uint64(st.Bsize) //nolint:gosec // a block size is positive
	return withCondition(&csi.NodeGetVolumeStatsResponse{
		Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: clamp(st.Blocks, bsize), Available: clamp(st.Bavail, bsize), Used: clamp(st.Blocks-st.Bfree, bsize)},
			{Unit: csi.VolumeUsage_INODES, Total: clamp(st.Files, 1), Available: clamp(st.Ffree, 1), Used: clamp(st.Files-st.Ffree, 1)},
		},
	}, false, "the S3 filesystem answers"), nil
}

// staleTargets remembers the targets whose dead mount a republish replaced: the workload's
// containers, started before, hold a copy of the dead mount itself, which no later mount at the
// target replaces, so the volume stays abnormal for them until the workload is unpublished.
type staleTargets struct {
	mu      sync.Mutex
	targets map[string]string
}

func (t *staleTargets) mark(target, message string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.targets == nil {
		t.targets = map[string]string{}
	}
	t.targets[target] = message
}

func (t *staleTargets) get(target string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	msg, ok := t.targets[target]
	return msg, ok
}

func (t *staleTargets) forget(target string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.targets, target)
}

// abnormal is the answer for a mount whose filesystem is dead or silent.
func abnormal(message string) *csi.NodeGetVolumeStatsResponse {
	return withCondition(&csi.NodeGetVolumeStatsResponse{
		Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES},
			{Unit: csi.VolumeUsage_INODES},
		},
	}, true, message)
}

// clamp is n*unit as an int64, saturated.
func clamp(n, unit uint64) int64 {
	if unit != 0 && n > math.MaxInt64/unit {
		return math.MaxInt64
	}
	return int64(n * unit) //nolint:gosec // bounded above
}

// mountpointPodOf names the Mountpoint Pod whose source the target entry is a bind of, or ""
// when none is (the source was mounted again since, or the table cannot be read).
func (s *Server) mountpointPodOf(target mount.Entry) string {
	table, err := mount.ReadTable()
	if err != nil {
		return ""
	}
	source, ok := ourSource(table, target, s.cfg.KubeletDir)
	if !ok {
		return ""
	}
	return filepath.Base(source)
}
