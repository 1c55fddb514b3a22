package csi

import (
	"context"
	"errors"
	"os"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3csi/shared/cabundle"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/volumecontext"

	"github.com/s3csi/s3csi/services/node-agent/internal/attach"
	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
	"github.com/s3csi/s3csi/services/node-agent/internal/source"
)

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
	caBundle, err := s.caBundle()
	if err != nil {
		return err
	}
	dev, err := mount.FUSE(dir, a.Attachment.Spec.ReadOnly)
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	defer func() { _ = dev.Close() }()
	req := &handshake.Request{
		Bucket: p.Bucket, Args: s.args(p), Env: s.env(),
		ConfigFile: files.ConfigFile, CredentialsFile: files.CredentialsFile,
		MaxRead: mount.FUSEMaxRead, VolumeId: p.VolumeID, CaBundle: caBundle,
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

// caBundle reads the driver's CA bundle, nil when none is configured. A file that is missing or
// not PEM certificates fails the mount with FailedPrecondition: without it the mounter could
// only fail later, on the endpoint's certificate.
func (s *Server) caBundle() ([]byte, error) {
	if s.cfg.CABundleFile == "" {
		return nil, nil
	}
	data, err := cabundle.ReadFile(s.cfg.CABundleFile)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition,
			"the driver's CA bundle for the S3 endpoint is not usable: %v; fix the chart value %s (PEM certificates, at most %d bytes)",
			err, cabundle.ChartValue, cabundle.MaxSize)
	}
	return data, nil
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
