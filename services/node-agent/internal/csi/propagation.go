package csi

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/mount"
)

// CheckPropagation checks that a mount made under dir, a directory under kubeletDir, reaches
// the host's mount namespace, where kubelet and the container runtime look for it: that the
// node-agent's container mounts the kubelet dir with Bidirectional propagation
// (mount.CheckPropagates). It returns FAILED_PRECONDITION naming the fix when it does not, and
// INTERNAL when the mount table cannot be read.
func CheckPropagation(kubeletDir, dir string) error {
	_, err := mount.CheckPropagates(dir)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mount.ErrNotPropagated):
		return status.Errorf(codes.FailedPrecondition, "%v: a mount made there stays inside the node-agent's container, "+
			"and kubelet would give the workload an empty directory; mount %s with mountPropagation: Bidirectional "+
			"in the node-agent DaemonSet", err, kubeletDir)
	default:
		return status.Errorf(codes.Internal, "check the mount propagation of %s: %v", dir, err)
	}
}
