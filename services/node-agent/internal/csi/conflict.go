package csi

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/mount"

	"github.com/s3csi/s3csi/services/node-agent/internal/attach"
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
	flags := strings.Join(p.MountFlags, ",")
	verdict := compatible{mountpointPod: mp, volumeID: p.VolumeID, options: optionSet(flags)}
	if s.compatible.seen(p.Target, verdict) {
		return nil
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
	if verdict.options != optionSet(spec.MountOptions) {
		return status.Errorf(codes.AlreadyExists,
			"target %s is served by Mountpoint Pod %s/%s with mount options %q, and the request has %q; "+
				"mount options are fixed for a mount: restart the workload pod to mount with the new ones",
			p.Target, s.cfg.MountpointNamespace, mp, spec.MountOptions, flags)
	}
	s.compatible.remember(p.Target, verdict)
	return nil
}

// compatible is a republish request found compatible with the attachment of the Mountpoint Pod
// that serves its target.
type compatible struct {
	mountpointPod, volumeID, options string
}

// compatibleTargets remembers, per published target, the last republish found compatible.
//
// Problem: kubelet republishes every published volume periodically, and reading the
// attachment each time costs one API request per workload volume and period.
// Solution: an attachment's key fields (volume id, mount options) are immutable, so a request
// equal to one already found compatible with the same Mountpoint Pod's attachment is compatible
// again; only a request that differs, or a target now served by another Mountpoint Pod, reads the
// attachment. Unpublish forgets the target.
// Invariant: a remembered verdict was checked against the API server for that Mountpoint Pod.
type compatibleTargets struct {
	mu      sync.Mutex
	targets map[string]compatible
}

func (c *compatibleTargets) seen(target string, v compatible) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	got, ok := c.targets[target]
	return ok && got == v
}

func (c *compatibleTargets) remember(target string, v compatible) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.targets == nil {
		c.targets = map[string]compatible{}
	}
	c.targets[target] = v
}

func (c *compatibleTargets) forget(target string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.targets, target)
}

// optionSet is the sorted set of the ","-separated options in joined, joined by ",".
//
// Problem: the attachment keeps the PV's mount options in their stored order, while kubelet
// sends them deduplicated and sorted (JoinMountOptions), so the two strings differ for the
// same options.
// Solution: options are compared as sets, each side split on "," the same way.
// Invariant: a republish with the PV's options in any order or repetition is compatible.
func optionSet(joined string) string {
	var set []string
	for o := range strings.SplitSeq(joined, ",") {
		if o != "" {
			set = append(set, o)
		}
	}
	slices.Sort(set)
	return strings.Join(slices.Compact(set), ",")
}

func access(readOnly bool) string {
	if readOnly {
		return "read-only"
	}
	return "read-write"
}
