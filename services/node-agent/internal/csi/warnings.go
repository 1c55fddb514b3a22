package csi

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
)

// ReasonMountOptionsIgnored is the reason of the Warning Event on a workload whose volume has
// mount options that the policy ignores or changes (docs/mount-options.md).
const ReasonMountOptionsIgnored = "MountOptionsIgnored"

// maxEventMessage bounds the message of the Warning Event (events.k8s.io keeps 1 kB of a note).
const maxEventMessage = 1024

// warnOptions tells the workload of p which of its volume's mount options the policy dropped
// or changed and why (mountopts.Options.Warnings): in the log, with the PersistentVolume's
// name, and as a Warning Event on the workload pod (Config.WarnWorkload).
//
// Problem: a PersistentVolume written for the Scality or AWS driver carries options that only
// tuned mount-s3 (debug-crt, cache on a host path); refusing them would stop the workload, and
// dropping them silently would hide from its owner that they do nothing.
// Solution: the mount goes on without them, and the workload's owner reads why in the pod's
// events, where a failed mount would have shown.
// Invariant: called once per workload and volume, after its first publish succeeded (never for
// a republish), so the owner is told once.
func (s *Server) warnOptions(ctx context.Context, p *publishRequest) {
	warnings := p.Options.Warnings()
	if len(warnings) == 0 {
		return
	}
	logr.FromContextOrDiscard(ctx).Info("Mount options of the PersistentVolume are ignored or changed",
		"pv", p.PVName, "warnings", warnings)
	if s.cfg.WarnWorkload == nil || p.PodName == "" || p.PodNamespace == "" {
		return
	}
	msg := fmt.Sprintf("PersistentVolume %s: %s (docs/mount-options.md)", p.PVName, strings.Join(warnings, "; "))
	if len(msg) > maxEventMessage {
		msg = strings.ToValidUTF8(msg[:maxEventMessage-len("...")], "") + "..."
	}
	s.cfg.WarnWorkload(ctx, types.NamespacedName{Namespace: p.PodNamespace, Name: p.PodName}, types.UID(p.PodUID),
		ReasonMountOptionsIgnored, msg)
}
