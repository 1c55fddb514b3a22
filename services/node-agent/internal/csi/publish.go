package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/volumecontext"

	"github.com/s3csi/s3csi/services/node-agent/internal/attach"
	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
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
		// The published mount is fine; credentials are refreshed on the next republish.
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

// written is the profile files written into a Mountpoint Pod's comm dir: their names, and what
// root records of them (source.Sent).
type written struct {
	credentials.Files
	profiles          credentials.Profiles
	driverCredentials bool
}

// writeCredentials writes the profile files for p into commDir, the comm dir of Mountpoint Pod
// mp; while mp's source is kept, the pod that replaces it gets them.
func (s *Server) writeCredentials(mp, commDir string, p *publishRequest) (written, error) {
	creds, driver := s.cfg.DriverCredentials, true
	// A volume of a StorageClass that names only a provisioner secret asks for secret
	// authentication but gets no node publish secret: it mounts with the driver's credentials,
	// as it did under the Scality v2 driver.
	if p.AuthSource == volumecontext.AuthenticationSourceSecret && len(p.Secrets) > 0 {
		c, err := credentials.FromSecrets(p.Secrets)
		if err != nil {
			return written{}, status.Errorf(codes.InvalidArgument, "%v; set nodePublishSecretRef on the PersistentVolume", err)
		}
		creds, driver = c, false
	}
	profiles := credentials.Render(creds, s.cfg.Region)
	files, err := s.sources.WriteProfiles(mp, commDir, profiles)
	if err != nil {
		return written{}, status.Errorf(codes.Internal, "write credentials: %v", err)
	}
	return written{Files: files, profiles: profiles, driverCredentials: driver}, nil
}

// probedSource is what a probe of a source found before its Mountpoint Pod's lock was taken.
type probedSource struct {
	state mount.State
	entry mount.Entry
}

// lockProbeRounds bounds how often lockProbed probes again when the source changed between its
// probe and the lock.
const lockProbeRounds = 3

// lockProbed probes source, then takes the Mountpoint Pod's lock and returns it with what the
// probe found.
//
// Problem: the stat of a source whose FUSE server is stopped blocks for as long as the server
// is stopped; made under the Mountpoint Pod's lock it would hold every publish and cleanup of
// that pod, and kubelet's retries would pile up behind it.
// Solution: the bounded probe (mount.Check) runs before the lock; a source that does not answer
// fails the publish with UNAVAILABLE. Under the lock only the mount table is read, to check that
// the source is still the mount the probe saw (same mount id, or still none); when it is not (a
// concurrent publish or cleanup changed it) the lock is released and the source probed again.
// Invariant: nothing stats through a FUSE mount while holding a Mountpoint Pod's lock.
func (s *Server) lockProbed(ctx context.Context, mp, source string) (func(), probedSource, error) {
	for range lockProbeRounds {
		state, entry, err := mount.Check(source)
		if err != nil {
			return nil, probedSource{}, status.Errorf(codes.Internal, "check source %s: %v", source, err)
		}
		if state == mount.Hung {
			return nil, probedSource{}, status.Errorf(codes.Unavailable,
				"the filesystem of Mountpoint Pod %s/%s does not answer (stopped or stuck); see kubectl logs -n %s %s, "+
					"or delete that pod so that a new one serves the volume", s.cfg.MountpointNamespace, mp, s.cfg.MountpointNamespace, mp)
		}
		unlock, err := s.mpLocks.LockContext(ctx, mp)
		if err != nil {
			return nil, probedSource{}, status.Errorf(waitCode(ctx), "wait for Mountpoint Pod %s: %v", mp, err)
		}
		table, err := mount.ReadTable()
		if err != nil {
			unlock()
			return nil, probedSource{}, status.Errorf(codes.Internal, "%v", err)
		}
		now, listed := table.Lookup(source)
		if listed == (entry.MountPoint != "") && (!listed || now.ID == entry.ID) {
			return unlock, probedSource{state: state, entry: entry}, nil
		}
		unlock()
	}
	return nil, probedSource{}, status.Errorf(codes.Aborted, "source %s changed while it was checked; retry", source)
}

// ensureSource mounts the Mountpoint Pod's filesystem on source unless it is already live; the
// caller probed source and holds the Mountpoint Pod's lock (lockProbed). It returns true when
// the source was already mounted (a shared mount).
func (s *Server) ensureSource(ctx context.Context, source string, probed probedSource, mp mountpointPod, a *attach.Assignment, p *publishRequest, files written) (bool, error) {
	log := logr.FromContextOrDiscard(ctx)
	state, entry := probed.state, probed.entry
	switch state {
	case mount.Mounted:
		if mount.IsFUSE(entry) {
			return true, nil
		}
		return false, status.Errorf(codes.Internal, "source %s holds a %s mount, not this driver's FUSE mount", source, entry.FsType)
	case mount.Corrupted:
		log.Info("The Mountpoint Pod's filesystem is dead; mounting it again for new workloads", "source", source)
		if s.cfg.DeadSource != nil {
			except := p.PodUID
			if p.deadTarget {
				except = "" // this workload used the dead mount too
			}
			s.cfg.DeadSource(ctx, a.MountpointPod, except)
		}
		if err := mount.Unmount(source); err != nil {
			return false, status.Errorf(codes.Internal, "remove dead source mount %s: %v", source, err)
		}
	case mount.Missing:
		if err := os.MkdirAll(source, 0o750); err != nil {
			return false, status.Errorf(codes.Internal, "create source dir: %v", err)
		}
	}
	return false, s.mountSource(ctx, source, mp, a, p, files)
}

// mountpointPod is the running Mountpoint Pod a publish mounts through, with its comm dir.
type mountpointPod struct {
	pod     *corev1.Pod
	commDir string
}

// mountSource mounts FUSE on source and hands the connection to the Mountpoint Pod.
func (s *Server) mountSource(ctx context.Context, dir string, serving mountpointPod, a *attach.Assignment, p *publishRequest, files written) error {
	ns, mp := s.cfg.MountpointNamespace, a.MountpointPod
	dev, err := mount.FUSE(dir, a.Attachment.Spec.ReadOnly)
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	defer func() { _ = dev.Close() }()
	req := &handshake.Request{
		Bucket: p.Bucket, Args: s.args(p), Env: s.env(),
		ConfigFile: files.ConfigFile, CredentialsFile: files.CredentialsFile,
		MaxRead: mount.FUSEMaxRead, VolumeId: p.VolumeID,
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("source", dir, "mountpointPod", mp)
	err = s.sources.Keep(logr.NewContext(ctx, log), mp, serving.pod, dev,
		source.Sent{Request: req, Profiles: files.profiles, DriverCredentials: files.driverCredentials})
	if err == nil {
		// After the mounter answered: the kernel lowers the readahead to what the server
		// accepts when it answers FUSE_INIT, which offers the readahead the mount had then.
		if err := mount.SetReadAhead(dir, mount.FUSEReadAheadKiB); err != nil {
			logr.FromContextOrDiscard(ctx).Info("Sequential reads of this mount use the kernel's default readahead", "source", dir, "error", err.Error())
		}
		logr.FromContextOrDiscard(ctx).Info("Mounted the Mountpoint Pod's filesystem", "source", dir, "bucket", p.Bucket)
		return nil
	}
	if uerr := mount.Unmount(dir); uerr != nil {
		logr.FromContextOrDiscard(ctx).Error(uerr, "Removing the failed source mount failed", "source", dir)
	}
	s.emit(&eventspb.MountFailed{Node: s.cfg.NodeName, VolumeId: p.VolumeID, PvName: p.PVName,
		MountpointPodName: mp, WorkloadPodUids: []string{p.PodUID}, Reason: "MounterError", Message: err.Error()})
	var merr *handshake.MounterError
	if errors.As(err, &merr) {
		return status.Errorf(codes.Internal, "Mountpoint Pod %s/%s could not mount bucket %q: %s; see kubectl logs -n %s %s",
			ns, mp, p.Bucket, merr.Message, ns, mp)
	}
	return status.Errorf(waitCode(ctx), "hand the mount of bucket %q to Mountpoint Pod %s/%s: %v; see kubectl logs -n %s %s",
		p.Bucket, ns, mp, err, ns, mp)
}

// env is the S3 client configuration every Mountpoint Pod receives; never secrets.
// args are the volume's mount options, checked by the policy, with the driver's own settings.
func (s *Server) args(p *publishRequest) []string {
	args := p.Options.Args()
	if s.cfg.PathStyle && !p.Options.Has("force-path-style") {
		args = append(args, "--force-path-style")
	}
	return args
}

func (s *Server) env() []string {
	env := []string{"AWS_PROFILE=" + credentials.Profile}
	if s.cfg.Region != "" {
		env = append(env, "AWS_REGION="+s.cfg.Region)
	}
	if s.cfg.EndpointURL != "" {
		env = append(env, "AWS_ENDPOINT_URL="+s.cfg.EndpointURL)
	}
	return env
}

// bind bind-mounts source on the target and checks in the mount table that the target is a
// bind of this driver's FUSE mount at source; on failure it leaves nothing behind. It never
// stats through the mount (the caller holds the Mountpoint Pod's lock): answers does, after the
// lock. It returns whether it created the target dir.
func (s *Server) bind(source string, p *publishRequest) (bool, error) {
	created := false
	err := os.Mkdir(p.Target, 0o750)
	if errors.Is(err, os.ErrNotExist) {
		err = os.MkdirAll(p.Target, 0o750)
	}
	switch {
	case err == nil:
		created = true
	case !errors.Is(err, os.ErrExist):
		return false, status.Errorf(codes.Internal, "create target dir: %v", err)
	}
	fail := func(err error) error {
		_ = mount.Unmount(p.Target)
		if created {
			_ = mount.RemoveDir(p.Target)
		}
		return status.Errorf(codes.Internal, "%v", err)
	}
	if err := mount.BindMount(source, p.Target, p.ReadOnly); err != nil {
		return false, fail(err)
	}
	if err := verifyTable(p.Target, source); err != nil {
		return false, fail(err)
	}
	return created, nil
}

// answers checks, with a bounded stat, that the filesystem at a just bound target answers; when
// it does not, it removes the bind (detaching it when the stat timed out, since the blocked
// probe keeps it busy) and the target dir it created.
func (s *Server) answers(ctx context.Context, target string, created bool) error {
	_, err := mount.Stat(target, mount.ProbeTimeout)
	if err == nil {
		return nil
	}
	remove := mount.Unmount
	if errors.Is(err, mount.ErrNotAnswering) {
		remove = mount.Detach
	}
	if rerr := remove(target); rerr != nil {
		logr.FromContextOrDiscard(ctx).Error(rerr, "Removing the unverified bind failed", "target", target)
	} else if created {
		_ = mount.RemoveDir(target)
	}
	if errors.Is(err, mount.ErrNotAnswering) {
		return notAnswering(target, s.cfg.MountpointNamespace)
	}
	return status.Errorf(codes.Internal, "verify %s: the filesystem does not answer: %v", target, err)
}

// notAnswering is the error of a publish whose filesystem did not answer a bounded stat.
func notAnswering(target, namespace string) error {
	return status.Errorf(codes.Unavailable, "the filesystem at %s does not answer (its Mountpoint Pod is stopped or stuck); "+
		"see the logs of the Mountpoint Pods in namespace %s, or restart the workload pod", target, namespace)
}

// verify checks that target is a bind of the live FUSE mount at source; the stat through target
// is bounded (mount.ErrNotAnswering).
func verify(target, source string) error {
	if err := verifyTable(target, source); err != nil {
		return err
	}
	if _, err := mount.Stat(target, mount.ProbeTimeout); err != nil {
		return fmt.Errorf("verify %s: the filesystem does not answer: %w", target, err)
	}
	return nil
}

// verifyTable checks, in the mount table only, that target is a bind of this driver's FUSE
// mount at source.
func verifyTable(target, source string) error {
	table, err := mount.ReadTable()
	if err != nil {
		return err
	}
	t, ok := table.Lookup(target)
	if !ok {
		return fmt.Errorf("verify %s: not mounted", target)
	}
	src, ok := table.Lookup(source)
	if !ok || !mount.IsFUSE(src) || src.Source != mount.FUSESource {
		return fmt.Errorf("verify %s: source %s is not this driver's FUSE mount", target, source)
	}
	if !mount.SameDevice(t, src) {
		return fmt.Errorf("verify %s: not a bind of %s", target, source)
	}
	return nil
}

// emit publishes an audit event when events are enabled.
func (s *Server) emit(payload proto.Message) {
	if s.events != nil {
		s.events.Notify("", payload)
	}
}
