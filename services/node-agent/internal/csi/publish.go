package csi

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/mppod/mppodcheck"

	"github.com/s3csi/s3csi/services/node-agent/internal/attach"
	"github.com/s3csi/s3csi/services/node-agent/internal/metrics"
	"github.com/s3csi/s3csi/services/node-agent/internal/podwatch"
	"github.com/s3csi/s3csi/services/node-agent/internal/source"
)

// NodePublishVolume implements csi.NodeServer.
//
// Problem: a publish that returns OK without a live FUSE mount lets the container write to the
// node's disk; a publish that fails half-way can leave a mount nobody removes.
// Solution: validate everything first, the propagation of the mount the bind will be made under
// included (CheckPropagation); wait for the attachment (event or fallback re-read) and the
// Mountpoint Pod; under the Mountpoint Pod's lock mount the source once and bind it; then
// verify that the target is a bind of this Mountpoint Pod's live FUSE mount.
// Invariant: OK means verified; any failure undoes the mounts this call made.
func (s *Server) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	p, err := parsePublish(s.cfg.KubeletDir, req)
	if err != nil {
		return nil, err
	}
	release, ok := s.inflight.tryAcquire(p.Target)
	if !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on target %s is already in progress", p.Target)
	}
	defer release()
	log := logr.FromContextOrDiscard(ctx).WithValues("volume", p.VolumeID, "pod", p.PodUID)
	ctx = logr.NewContext(ctx, log)
	start := time.Now()
	// Where kubelet looks: the bind must reach the host's mount namespace, not only this one.
	if err := CheckPropagation(s.cfg.KubeletDir, filepath.Dir(p.Target)); err != nil {
		return nil, err
	}

	if done, err := s.republish(ctx, p); err != nil || done {
		if err == nil {
			log.V(1).Info("Republished volume: target verified, credentials refreshed")
			return &csi.NodePublishVolumeResponse{}, nil
		}
		return nil, err
	}

	t := time.Now()
	a, err := s.attach.Wait(ctx, attach.Key{PodUID: p.PodUID, PVName: p.PVName}, p.VolumeID)
	s.metrics.Phase(metrics.PhaseWaitAttachment, time.Since(t))
	if err != nil {
		return nil, status.Errorf(waitCode(ctx), "no MountpointS3PodAttachment on node %s records pod %s for volume %s yet: %v; "+
			"check the pod-reconciler's logs", s.cfg.NodeName, p.PodUID, p.PVName, err)
	}
	mp := a.MountpointPod
	log = log.WithValues("mountpointPod", mp)
	ctx = logr.NewContext(ctx, log)

	t = time.Now()
	pod, err := s.pods.WaitRunning(ctx, mp)
	s.metrics.Phase(metrics.PhaseWaitPod, time.Since(t))
	if errors.Is(err, mppodcheck.ErrImpostor) {
		return nil, status.Errorf(codes.FailedPrecondition, "%v", err)
	}
	if errors.Is(err, podwatch.ErrCannotStart) {
		return nil, status.Errorf(codes.Unavailable, "%v; fix it (the Mountpoint Pods run the chart's image.repositories.mounter) and the next retry mounts; "+
			"see kubectl describe pod -n %s %s", err, s.cfg.MountpointNamespace, mp)
	}
	if err != nil {
		return nil, status.Errorf(waitCode(ctx), "Mountpoint Pod %s/%s is not running: %v; see kubectl describe pod -n %s %s",
			s.cfg.MountpointNamespace, mp, err, s.cfg.MountpointNamespace, mp)
	}

	commDir, err := source.CommDir(s.cfg.KubeletDir, string(pod.UID))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "Mountpoint Pod %s/%s: %v", s.cfg.MountpointNamespace, mp, err)
	}
	source, err := mppod.SourceDir(s.cfg.KubeletDir, mp)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "attachment for pod %s and volume %s names no valid Mountpoint Pod: %v; "+
			"check the MountpointS3PodAttachment and the pod-reconciler's logs", p.PodUID, p.PVName, err)
	}
	t = time.Now()
	unlock, probed, err := s.lockProbed(ctx, mp, source)
	if err != nil {
		return nil, err
	}
	unlockOnce := sync.OnceFunc(unlock)
	defer unlockOnce()
	if pod.DeletionTimestamp != nil && probed.state != mount.Mounted {
		// Its mounter serves on only for the binds it has, and exits once they are gone.
		return nil, status.Errorf(codes.Unavailable, "Mountpoint Pod %s/%s is terminating and takes no new mount; the "+
			"pod-reconciler replaces it once it is gone and the next retry mounts the volume; see kubectl get pod -n %s %s",
			s.cfg.MountpointNamespace, mp, s.cfg.MountpointNamespace, mp)
	}
	files, err := s.writeCredentials(mp, commDir, p)
	if err != nil {
		return nil, err
	}
	shared, err := s.ensureSource(ctx, source, probed, mountpointPod{pod: pod, commDir: commDir}, a, p, files)
	s.metrics.Phase(metrics.PhaseMount, time.Since(t))
	if err != nil {
		return nil, err
	}
	t = time.Now()
	created, err := s.bind(source, p)
	unlockOnce()
	if err == nil {
		err = s.answers(ctx, p.Target, created)
	}
	s.metrics.Phase(metrics.PhaseBind, time.Since(t))
	if err != nil {
		return nil, err
	}
	d := time.Since(start)
	log.Info("Published volume", "target", p.Target, "sharedSource", shared, "duration", d.String())
	s.warnOptions(ctx, p)
	s.emit(&eventspb.VolumePublished{
		Node: s.cfg.NodeName, VolumeId: p.VolumeID, PvName: p.PVName, WorkloadPodUid: p.PodUID,
		MountpointPodName: mp, TargetPath: p.Target, ReadOnly: p.ReadOnly, SharedSource: shared,
		DurationMs: d.Milliseconds(),
	})
	return &csi.NodePublishVolumeResponse{}, nil
}

// waitCode is DeadlineExceeded when the request's deadline ended the wait, else Unavailable:
// both tell kubelet to retry.
func waitCode(ctx context.Context) codes.Code {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return codes.DeadlineExceeded
	}
	return codes.Unavailable
}

// emit publishes an audit event when events are enabled.
func (s *Server) emit(payload proto.Message) {
	if s.events != nil {
		s.events.Notify("", payload)
	}
}
