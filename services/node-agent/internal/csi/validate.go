package csi

import (
	"path/filepath"
	"regexp"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/mountopts"
	"github.com/s3csi/s3csi/shared/volumecontext"
)

// targetRE is the shape of a kubelet target path under the kubelet dir:
// pods/<pod UID>/volumes/kubernetes.io~csi/<PV name>/mount.
var targetRE = regexp.MustCompile(`^pods/([0-9a-f][0-9a-f-]{0,63})/volumes/kubernetes\.io~csi/([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)/mount$`)

// publishRequest is a checked NodePublishVolume request.
type publishRequest struct {
	VolumeID   string
	Target     string
	PodUID     string
	PVName     string
	Bucket     string
	AuthSource string
	ReadOnly   bool
	Options    *mountopts.Options
	// MountFlags are the capability's mount flags as sent: the PV's mount options, which the
	// attachment's sharing key records joined by ",".
	MountFlags []string
	Secrets    map[string]string

	// PodName and PodNamespace name the workload pod (kubelet's podInfoOnMount; "" without), on
	// which warnOptions records what the policy dropped or changed of the mount options
	// (Options.Warnings).
	PodName, PodNamespace string
	// deadTarget is set when the target held a dead mount of this workload's (its container
	// holds that mount).
	deadTarget bool
}

// parseTarget checks that target is a kubelet CSI target under kubeletDir and returns the pod
// UID and PV name it names.
func parseTarget(kubeletDir, target string) (podUID, pvName string, err error) {
	if target == "" {
		return "", "", status.Error(codes.InvalidArgument, "target path is missing")
	}
	if !filepath.IsAbs(target) || filepath.Clean(target) != target {
		return "", "", status.Errorf(codes.InvalidArgument, "target path %q is not a clean absolute path", target)
	}
	rel, err := filepath.Rel(kubeletDir, target)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", "", status.Errorf(codes.InvalidArgument, "target path %q is not under the kubelet dir %s", target, kubeletDir)
	}
	m := targetRE.FindStringSubmatch(rel)
	if m == nil {
		return "", "", status.Errorf(codes.InvalidArgument,
			"target path %q does not have the kubelet's shape <kubelet>/pods/<pod UID>/volumes/kubernetes.io~csi/<PV>/mount", target)
	}
	return m[1], m[2], nil
}

// checkCapability accepts filesystem access with any defined access mode and returns whether
// the mode is read-only.
func checkCapability(c *csi.VolumeCapability) (readOnly bool, err error) {
	if c == nil {
		return false, status.Error(codes.InvalidArgument, "volume capability is missing")
	}
	if c.GetMount() == nil {
		return false, status.Error(codes.InvalidArgument, "only filesystem (mount) access is supported, not block")
	}
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true, nil
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return false, nil
	}
	return false, status.Errorf(codes.InvalidArgument, "access mode %s is not supported", c.GetAccessMode().GetMode())
}

// parsePublish validates everything in req before anything is touched on the node.
func parsePublish(kubeletDir string, req *csi.NodePublishVolumeRequest) (*publishRequest, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is missing")
	}
	podUID, pvName, err := parseTarget(kubeletDir, req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	capReadOnly, err := checkCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	vc, err := volumecontext.Parse(req.GetVolumeContext())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v; fix the PersistentVolume's volumeAttributes", err)
	}
	if vc.PodUID != "" && vc.PodUID != podUID {
		return nil, status.Errorf(codes.InvalidArgument, "volume context pod UID %q does not match the target path's %q", vc.PodUID, podUID)
	}
	bucket, auth := vc.BucketName, vc.AuthenticationSource
	mnt := req.GetVolumeCapability().GetMount()
	opts, err := mountopts.Parse(mnt.GetMountFlags())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "check mount options: %v", err)
	}
	if err := opts.ApplyVolumeMountGroup(mnt.GetVolumeMountGroup()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	readOnly := req.GetReadonly() || capReadOnly || opts.Has("read-only")
	opts.ApplyDefaults(readOnly)
	return &publishRequest{
		VolumeID: req.GetVolumeId(), Target: req.GetTargetPath(), PodUID: podUID, PVName: pvName,
		PodName: vc.PodName, PodNamespace: vc.PodNamespace,
		Bucket: bucket, AuthSource: auth, ReadOnly: readOnly, Options: opts, MountFlags: mnt.GetMountFlags(),
		Secrets: req.GetSecrets(),
	}, nil
}
