package csi

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/node-agent/internal/source"
)

// republish handles a target that is already mounted: a live bind of one of our sources is
// kept when the request is compatible with it (credentials refreshed, re-verified) and refused
// with ALREADY_EXISTS when not (checkRepublish), a dead one is removed so the caller mounts
// afresh, and a legacy mountpoint-s3 mount made outside a Mountpoint Pod is kept as it is.
// It returns true when the target is published and nothing else is to be done.
func (s *Server) republish(ctx context.Context, p *publishRequest) (bool, error) {
	log := logr.FromContextOrDiscard(ctx)
	state, entry, err := mount.Check(p.Target)
	if err != nil {
		return false, status.Errorf(codes.Internal, "check target %s: %v", p.Target, err)
	}
	switch state {
	case mount.Missing, mount.NotMounted:
		return false, nil
	case mount.Hung:
		return false, notAnswering(p.Target, s.cfg.MountpointNamespace)
	case mount.Corrupted:
		log.Info("Target is a dead mount; replacing it", "target", p.Target)
		p.deadTarget = true
		s.stale.mark(p.Target, source.StaleMessage(s.cfg.MountpointNamespace, s.mountpointPodOf(entry)))
		if err := mount.Unmount(p.Target); err != nil {
			return false, status.Errorf(codes.Internal, "remove dead mount at %s: %v", p.Target, err)
		}
		return false, nil
	}
	table, err := mount.ReadTable()
	if err != nil {
		return false, status.Errorf(codes.Internal, "%v", err)
	}
	src, ours := ourSource(table, entry, s.cfg.KubeletDir)
	if !ours {
		if mount.IsFUSE(entry) && entry.Source == mount.FUSESource {
			s.republishLegacy(ctx, p.Target)
			return true, nil
		}
		return false, status.Errorf(codes.FailedPrecondition, "target %s already holds a mount that is not from this driver (%s)", p.Target, entry.FsType)
	}
	if err := verify(p.Target, src); err != nil {
		if errors.Is(err, mount.ErrNotAnswering) {
			return false, notAnswering(p.Target, s.cfg.MountpointNamespace)
		}
		log.Info("Target does not verify; mounting it again", "reason", err.Error())
		if err := mount.Unmount(p.Target); err != nil {
			return false, status.Errorf(codes.Internal, "remove unverified mount at %s: %v", p.Target, err)
		}
		return false, nil
	}
	mp := filepath.Base(src)
	if err := s.checkRepublish(ctx, p, entry, mp); err != nil {
		return false, err
	}
	pod, err := s.pods.Get(ctx, mp)
	if err != nil || pod == nil {
		// The published mount is fine; credentials are refreshed on the next republish. A pod
		// of that name that is not the Mountpoint Pod gets no key, and the operator is told.
		if err != nil {
			log.Error(err, "Credentials not refreshed", "mountpointPod", mp)
		}
		return true, nil
	}
	unlock, err := s.mpLocks.LockContext(ctx, mp)
	if err != nil {
		return false, status.Errorf(waitCode(ctx), "wait for Mountpoint Pod %s: %v", mp, err)
	}
	defer unlock()
	commDir, err := source.CommDir(s.cfg.KubeletDir, string(pod.UID))
	if err != nil {
		return false, status.Errorf(codes.Internal, "Mountpoint Pod %s: %v", mp, err)
	}
	if _, err := s.writeCredentials(mp, commDir, p); err != nil {
		return false, err
	}
	return true, nil
}

// ourSource finds the source mount, under the plugin's mnt dir, that target is a bind of.
func ourSource(table mount.Table, target mount.Entry, kubeletDir string) (string, bool) {
	mnt := mppod.SourcesDir(kubeletDir)
	for _, e := range table {
		if filepath.Dir(e.MountPoint) == mnt && mount.IsFUSE(e) && mount.SameDevice(e, target) {
			return e.MountPoint, true
		}
	}
	return "", false
}
