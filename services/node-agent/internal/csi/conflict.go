package csi

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/services/node-agent/internal/attach"
	"github.com/s3csi/s3csi/services/node-agent/internal/mount"
)

// attachmentReadTimeout bounds the attachment read of a republish: the API server being slow
// must not hold kubelet's periodic republish, which refreshes credentials.
const attachmentReadTimeout = 5 * time.Second

// checkRepublish refuses a NodePublishVolume on a target that is already a live bind of
// Mountpoint Pod mp when the request does not match how the target was published.
//
// Problem: keeping the mount whatever the arguments reports success for a volume the workload
// did not ask for: another volume's bucket, write access where read-only was asked (or the
// reverse), or a filesystem running with other mount options than the PV now names.
// Solution: the read-only flag is compared with the target's bind mount (the mount table, read
// already); the volume id and the set of mount options with the sharing key of the attachment
// that assigns this workload to mp (one API read, bounded). What cannot be read is not held against the
// request: without the attachment, only the read-only flag is checked.
// Invariant: a compatible republish goes on (and refreshes credentials); an incompatible one
// changes nothing and returns ALREADY_EXISTS naming the conflict, as the CSI spec asks.
func (s *Server) checkRepublish(ctx context.Context, p *publishRequest, target mount.Entry, mp string) error {
	if published := slices.Contains(target.MountOptions, "ro"); published != p.ReadOnly {
		return status.Errorf(codes.AlreadyExists,
			"target %s is already published %s and the request is %s; a published target keeps its access: "+
				"unpublish it first (restart the workload pod)", p.Target, access(published), access(p.ReadOnly))
	}
	rctx, cancel := context.WithTimeout(ctx, attachmentReadTimeout)
	defer cancel()
	a, err := s.attach.Find(rctx, attach.Key{PodUID: p.PodUID, PVName: p.PVName}, "")
	if err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("Cannot read the attachment; the republish is checked against the mount only",
			"mountpointPod", mp, "reason", err.Error())
		return nil
	}
	if a == nil {
		return nil // the workload is going away: its target is kept until it is unpublished
	}
	spec := a.Attachment.Spec
	if spec.VolumeID != p.VolumeID {
		return status.Errorf(codes.AlreadyExists,
			"target %s already holds volume %q of PersistentVolume %s; it cannot also be volume %q: unpublish it first",
			p.Target, spec.VolumeID, spec.PersistentVolumeName, p.VolumeID)
	}
	if a.MountpointPod != mp {
		return nil // the attachment's key describes another Mountpoint Pod than the one serving the target
	}
	if flags := strings.Join(p.MountFlags, ","); !slices.Equal(optionSet(flags), optionSet(spec.MountOptions)) {
		return status.Errorf(codes.AlreadyExists,
			"target %s is served by Mountpoint Pod %s/%s with mount options %q, and the request has %q; "+
				"mount options are fixed for a mount: restart the workload pod to mount with the new ones",
			p.Target, s.cfg.MountpointNamespace, mp, spec.MountOptions, flags)
	}
	return nil
}

// optionSet is the sorted set of the ","-separated options in joined.
//
// Problem: the attachment keeps the PV's mount options in their stored order, while kubelet
// sends them deduplicated and sorted (JoinMountOptions), so the two strings differ for the
// same options.
// Solution: options are compared as sets, each side split on "," the same way.
// Invariant: a republish with the PV's options in any order or repetition is compatible.
func optionSet(joined string) []string {
	var set []string
	for o := range strings.SplitSeq(joined, ",") {
		if o != "" {
			set = append(set, o)
		}
	}
	slices.Sort(set)
	return slices.Compact(set)
}

func access(readOnly bool) string {
	if readOnly {
		return "read-only"
	}
	return "read-write"
}
