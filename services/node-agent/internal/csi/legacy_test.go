package csi_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

// TestRepublishKeepsALegacyMountAndRefreshesItsToken makes the target a mountpoint-s3 FUSE mount
// served by a process outside any Mountpoint Pod, as the v1 systemd mounter left it, with no
// attachment for the workload: republish answers at once, keeps the mount, and copies the
// rotated web identity token to where the v1 mount-s3 reads it.
func TestRepublishKeepsALegacyMountAndRefreshesItsToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	n := startNode(t, nodeOptions{legacyTokenFile: tokenFile})
	uid, pv := uuid.NewUUID(), "pv-legacy"
	target := n.target(uid, pv)
	if err := os.Mkdir(target, 0o750); err != nil {
		t.Fatal(err)
	}

	// The host process of a v1 mount: a mounter serving a FUSE connection mounted on the target.
	host := &mountpointPod{commDir: t.TempDir()}
	if err := host.start(t, false); err != nil {
		t.Fatal(err)
	}
	dev, err := mount.FUSE(target, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = handshake.Send(ctx, filepath.Join(host.commDir, mppod.MountSockName), dev, &handshake.Request{Bucket: "legacy", MaxRead: mount.FUSEMaxRead})
	_ = dev.Close()
	if err != nil {
		t.Fatal(err)
	}

	legacyToken := filepath.Join(mppod.PluginDir(n.kubelet.Root), credentials.LegacyTokenName)
	for _, token := range []string{"token-before-rotation", "token-after-rotation"} {
		if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		// No attachment exists: a publish that waited for one would run into this deadline.
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := n.client.NodePublishVolume(rctx, publishRequest("vol-legacy", target, "legacy", uid))
		rcancel()
		if err != nil {
			t.Fatalf("republish of a legacy mount: %v", err)
		}
		if got := readFile(t, legacyToken); got != token {
			t.Fatalf("legacy token = %q, want %q", got, token)
		}
		if fi, err := os.Stat(legacyToken); err != nil || fi.Mode().Perm() != 0o640 {
			t.Fatalf("legacy token mode = %v, %v; want 0640", fi.Mode().Perm(), err)
		}
	}
	if state, _, err := mount.Check(target); err != nil || state != mount.Mounted {
		t.Fatalf("legacy target after republish: %v, %v; want it still mounted", state, err)
	}
}
