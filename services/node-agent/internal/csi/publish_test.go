package csi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv/testfs"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

const canaryAccessKey = "AKIACANARY0123456789"
const canarySecret = "canary/Secret+Value=0123456789abcdefghij"

func TestPublishMountsOnceAndSharesTheSourceBetweenWorkloads(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond,
		driverCreds: credentials.Static{AccessKeyID: canaryAccessKey, SecretAccessKey: canarySecret}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, volumeID := "pv-shared", "vol-shared"
	first, second := uuid.NewUUID(), uuid.NewUUID()
	mpName := mppod.Name(string(first), pv)
	n.createMountpointPod(mpName)
	s3pa := n.assign(pv, volumeID, string(first), mpName, mountOptions("allow-delete"))

	target1 := n.target(first, pv)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest(volumeID, target1, "bucket-a", first, "allow-delete")); err != nil {
		t.Fatalf("first publish: %v", err)
	}
	if got := readFile(t, filepath.Join(target1, testfs.HelloName)); got != testfs.HelloContent {
		t.Fatalf("first target shows %q", got)
	}
	if got := readFile(t, filepath.Join(target1, testfs.BucketName)); got != "bucket-a" {
		t.Fatalf("first target serves bucket %q, want bucket-a", got)
	}

	n.addWorkload(s3pa, mpName, string(second))
	target2 := n.target(second, pv)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest(volumeID, target2, "bucket-a", second, "allow-delete")); err != nil {
		t.Fatalf("second publish: %v", err)
	}
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	if binds := table.Binds(n.kubelet.SourceDir(mpName)); len(binds) != 2 {
		t.Fatalf("source has %d binds, want 2 (one FUSE mount shared)", len(binds))
	}
	// Publishing again is idempotent.
	if _, err := n.client.NodePublishVolume(ctx, publishRequest(volumeID, target2, "bucket-a", second, "allow-delete")); err != nil {
		t.Fatalf("republish: %v", err)
	}
	if strings.Contains(n.logs.all(), canarySecret) || strings.Contains(n.logs.all(), canaryAccessKey) {
		t.Fatal("a credential reached the logs")
	}
}

func TestPublishRefusesForbiddenMountOptions(t *testing.T) {
	n := startNode(t, nodeOptions{})
	uid := uuid.NewUUID()
	target := n.target(uid, "pv-forbidden")
	tests := []struct {
		name  string
		flags []string
	}{
		{name: "an endpoint that would receive the driver's credentials", flags: []string{"--endpoint-url=http://evil.example"}},
		{name: "a profile", flags: []string{"--profile=other"}},
		{name: "raw FUSE options", flags: []string{"-o", "allow_other"}},
		{name: "a log directory on the node", flags: []string{"--log-directory=/var/lib/kubelet"}},
		{name: "a CA bundle", flags: []string{"ca-bundle /etc/evil.pem"}},
		{name: "an unknown flag", flags: []string{"--no-such-option"}},
		{name: "a value smuggling a second option", flags: []string{"--region=us-east-1 --endpoint-url=http://evil"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := n.client.NodePublishVolume(context.Background(), publishRequest("vol", target, "bucket-b", uid, tt.flags...))
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
		})
	}
}

func TestPublishRefusesInvalidRequests(t *testing.T) {
	n := startNode(t, nodeOptions{})
	uid := uuid.NewUUID()
	good := n.target(uid, "pv-invalid")
	tests := []struct {
		name   string
		mutate func(r *csipb.NodePublishVolumeRequest)
	}{
		{name: "no volume id", mutate: func(r *csipb.NodePublishVolumeRequest) { r.VolumeId = "" }},
		{name: "a target outside the kubelet dir", mutate: func(r *csipb.NodePublishVolumeRequest) { r.TargetPath = "/etc/x/mount" }},
		{name: "a target not of the kubelet's shape", mutate: func(r *csipb.NodePublishVolumeRequest) {
			r.TargetPath = filepath.Join(n.kubelet.Root, "pods", "x")
		}},
		{name: "a target escaping with dot-dot", mutate: func(r *csipb.NodePublishVolumeRequest) { r.TargetPath = good + "/../../x/mount" }},
		{name: "no capability", mutate: func(r *csipb.NodePublishVolumeRequest) { r.VolumeCapability = nil }},
		{name: "block access", mutate: func(r *csipb.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		}},
		{name: "no bucket name", mutate: func(r *csipb.NodePublishVolumeRequest) { delete(r.VolumeContext, "bucketName") }},
		{name: "a pod UID that is not the target's", mutate: func(r *csipb.NodePublishVolumeRequest) {
			r.VolumeContext["csi.storage.k8s.io/pod.uid"] = "other"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := publishRequest("vol", good, "bucket-b", uid)
			tt.mutate(r)
			_, err := n.client.NodePublishVolume(context.Background(), r)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
		})
	}
}

func TestAFailedMountLeavesNothingBehindAndTellsWhereToLook(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, uid := "pv-fail", uuid.NewUUID()
	mpName := mppod.Name(string(uid), pv)
	n.createMountpointPod(mpName)
	n.assign(pv, "vol", string(uid), mpName)
	target := n.target(uid, pv)
	_, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, testfs.FailBucket, uid))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "kubectl logs") {
		t.Fatalf("err = %v, want Internal with the mounter's error and a kubectl logs hint", err)
	}
	table, terr := mount.ReadTable()
	if terr != nil {
		t.Fatal(terr)
	}
	for _, p := range []string{target, n.kubelet.SourceDir(mpName)} {
		if _, ok := table.Lookup(p); ok {
			t.Fatalf("%s is still mounted after a failed publish", p)
		}
	}
	if _, serr := os.Stat(target); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("target exists after a failed publish: %v", serr)
	}
}
