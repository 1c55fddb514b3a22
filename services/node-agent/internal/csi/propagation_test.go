package csi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
)

// TestPublishFailsWhenTheKubeletDirDoesNotPropagate deploys the node-agent as a DaemonSet
// without Bidirectional propagation would: its kubelet dir is a private mount, so a bind made
// there never reaches kubelet. The publish fails with FAILED_PRECONDITION naming the fix, and
// leaves no mount behind; with the propagation restored, the same publish succeeds.
func TestPublishFailsWhenTheKubeletDirDoesNotPropagate(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, uid := "pv-propagation", string(uuid.NewUUID())
	mpName := mppod.Name(uid, pv)
	n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	target := n.target(uuidOf(uid), pv)

	if err := unix.Mount("", n.kubelet.Root, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	_, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", uuidOf(uid)))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "mount "+n.kubelet.Root+" with mountPropagation: Bidirectional") {
		t.Fatalf("publish under a private kubelet dir: %v; want FAILED_PRECONDITION naming the fix", err)
	}
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{target, n.kubelet.SourceDir(mpName)} {
		if _, ok := table.Lookup(p); ok {
			t.Errorf("%s is mounted after the refused publish", p)
		}
	}

	if err := unix.Mount("", n.kubelet.Root, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", uuidOf(uid))); err != nil {
		t.Fatalf("publish under a shared kubelet dir: %v", err)
	}
}
