package csi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv/testfs"
)

func unpublishTwice(t *testing.T, n *node, target string) {
	t.Helper()
	for i := range 2 {
		_, err := n.client.NodeUnpublishVolume(context.Background(), &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: target})
		if err != nil {
			t.Fatalf("unpublish #%d: %v", i+1, err)
		}
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target still exists after unpublish: %v", err)
	}
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := table.Lookup(target); ok {
		t.Fatal("target still mounted after unpublish")
	}
}

func TestUnpublishSucceedsOnEveryKindOfTargetTwice(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	t.Run("a target that does not exist", func(t *testing.T) {
		unpublishTwice(t, n, n.target(uuid.NewUUID(), "pv-missing"))
	})
	t.Run("a target dir that is not mounted", func(t *testing.T) {
		target := n.target(uuid.NewUUID(), "pv-plain")
		if err := os.Mkdir(target, 0o750); err != nil {
			t.Fatal(err)
		}
		unpublishTwice(t, n, target)
	})
	t.Run("a live published target, then a dead one after the mounter was killed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pv := "pv-dead"
		live, dead := uuid.NewUUID(), uuid.NewUUID()
		mpName := mppod.Name(string(live), pv)
		mp := n.createMountpointPod(mpName)
		s3pa := n.assign(pv, "vol", string(live), mpName)
		n.addWorkload(s3pa, mpName, string(dead))
		liveTarget, deadTarget := n.target(live, pv), n.target(dead, pv)
		for _, tc := range []struct {
			uid    string
			target string
		}{{string(live), liveTarget}, {string(dead), deadTarget}} {
			if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", tc.target, "bucket-b", uuidOf(tc.uid))); err != nil {
				t.Fatal(err)
			}
		}
		unpublishTwice(t, n, liveTarget)

		mp.kill(t)
		var st unix.Stat_t
		err := unix.Stat(filepath.Join(deadTarget, testfs.HelloName), &st)
		if !errors.Is(err, unix.ENOTCONN) {
			t.Fatalf("stat in the dead target: %v, want ENOTCONN", err)
		}
		unpublishTwice(t, n, deadTarget)
	})
	t.Run("a request without a volume id or target", func(t *testing.T) {
		_, err := n.client.NodeUnpublishVolume(context.Background(), &csipb.NodeUnpublishVolumeRequest{TargetPath: "/x"})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("err = %v, want InvalidArgument", err)
		}
	})
}

func uuidOf(s string) types.UID { return types.UID(s) }
