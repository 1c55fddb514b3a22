package csi

import (
	"context"

	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

// republishLegacy keeps a target that the v1 (systemd) mounter mounted with mount-s3 outside any
// Mountpoint Pod: the mount-s3 process lives on the host, outside this driver's reach, and keeps
// serving until the workload restarts, when the target is published afresh through a Mountpoint
// Pod.
//
// Its credentials are what the v1 mounter gave it: access keys in the process environment, which
// nothing can change, and, with web identity, the driver's token copied to <plugin dir>/token,
// which is refreshed here from LegacyTokenFile as the v1 mounter did on each republish. A refresh
// that fails is logged and the target kept: the mount serves until the old token expires.
func (s *Server) republishLegacy(ctx context.Context, target string) {
	log := logr.FromContextOrDiscard(ctx).WithValues("target", target)
	if s.cfg.LegacyTokenFile == "" {
		log.Info("Target is a legacy mount made outside a Mountpoint Pod; keeping it until the workload restarts")
		return
	}
	if err := credentials.RefreshLegacyToken(mppod.PluginDir(s.cfg.KubeletDir), s.cfg.LegacyTokenFile); err != nil {
		log.Error(err, "Refreshing the web identity token of a legacy mount failed; keeping the mount")
		return
	}
	log.Info("Target is a legacy mount made outside a Mountpoint Pod; refreshed its web identity token and kept it until the workload restarts")
}
