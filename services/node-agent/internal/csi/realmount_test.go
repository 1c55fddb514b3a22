package csi_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

// TestPublishServesTheBucketThroughTheRealMounter runs the whole node path with the real
// filesystem: NodePublishVolume hands the /dev/fuse descriptor to s3csi-mounter's engine over
// mount.sock, and the workload's target shows the bucket's objects and writes new ones to it.
func TestPublishServesTheBucketThroughTheRealMounter(t *testing.T) {
	srv := testenv.StartS3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := srv.RootClient().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(srv.Bucket), Key: aws.String("dir/hello.txt"), Body: strings.NewReader("from S3"),
	}); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond, s3: srv,
		driverCreds: credentials.Static{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}})
	pv, volumeID, uid := "pv-real", "vol-real", uuid.NewUUID()
	mpName := mppod.Name(string(uid), pv)
	n.createMountpointPod(mpName)
	n.assign(pv, volumeID, string(uid), mpName)
	target := n.target(uid, pv)

	if _, err := n.client.NodePublishVolume(ctx, publishRequest(volumeID, target, srv.Bucket, uid, "allow-delete")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if got := readFile(t, filepath.Join(target, "dir", "hello.txt")); got != "from S3" {
		t.Fatalf("target shows %q, want the object's content", got)
	}
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	source, ok := table.Lookup(n.kubelet.SourceDir(mpName))
	if !ok {
		t.Fatal("source not mounted")
	}
	readAhead := readFile(t, fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", source.Major, source.Minor))
	if strings.TrimSpace(readAhead) != strconv.Itoa(mount.FUSEReadAheadKiB) {
		t.Fatalf("source readahead = %s KiB, want %d", readAhead, mount.FUSEReadAheadKiB)
	}
	if err := os.WriteFile(filepath.Join(target, "written.txt"), []byte("from the pod"), 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	stored, err := os.ReadFile(filepath.Join(srv.Dir, srv.Bucket, "written.txt"))
	if err != nil || string(stored) != "from the pod" {
		t.Fatalf("object in the bucket = %q, %v; want the written content", stored, err)
	}
	if err := os.Remove(filepath.Join(target, "written.txt")); err != nil {
		t.Fatalf("delete through the mount with --allow-delete: %v", err)
	}
	if _, err := n.client.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: volumeID, TargetPath: target}); err != nil {
		t.Fatalf("unpublish: %v", err)
	}
	if strings.Contains(n.logs.all(), srv.SecretKey) {
		t.Fatal("the S3 secret reached the node-agent's logs")
	}
}
