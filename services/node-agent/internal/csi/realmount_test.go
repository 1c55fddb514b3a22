package csi_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
	"github.com/s3csi/s3csi/services/node-agent/internal/health"
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

// TestAMounterIsReplacedUnderTheWorkload ends a Mountpoint Pod's mounter while a workload has a
// file open through its target, in the two ways a mounter ends under its workloads, and starts
// the next mounter as Kubernetes would:
//
//   - killed: SIGKILL; kubelet restarts the container in the same pod;
//   - handed over: SIGTERM (the pod is deleted); the mounter hands the mount over and exits 0,
//     and a pod of the same name, with a new UID and comm dir, replaces it.
//
// The node-agent hands the next mounter the FUSE connection it kept, and the open file reads on,
// without an error and without a new publish; the workload gets a MountpointReplaced Warning
// (killed) or a Normal MountpointHandedOver Event (handed over).
func TestAMounterIsReplacedUnderTheWorkload(t *testing.T) {
	srv := testenv.StartS3(t)
	content := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	if _, err := srv.RootClient().PutObject(t.Context(), &s3.PutObjectInput{
		Bucket: aws.String(srv.Bucket), Key: aws.String("dir/big.txt"), Body: strings.NewReader(content),
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		handover bool
		reason   string
		message  string
	}{
		{name: "killed", reason: health.ReasonReplaced, message: "ESTALE"},
		{name: "handed over", handover: true, reason: health.ReasonHandedOver, message: "without an error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			dead := make(chan string, 1)
			var monitor *health.Monitor
			n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond, s3: srv, resumeWait: time.Minute,
				driverCreds: credentials.Static{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey},
				deadSource:  func(_ context.Context, mp, _ string) { dead <- mp },
				replaced:    func(ctx context.Context, mp string, r handshake.Resumption) { monitor.Replaced(ctx, mp, r) }})
			monitor = health.New(n.kubelet.Root, n.name, mppod.DefaultNamespace, time.Hour, apiServer.Client, nil, nil)
			workload := createWorkload(ctx, t, n)
			pv, volumeID, uid := "pv-replaced", "vol-replaced", workload.UID
			mpName := mppod.Name(string(uid), pv)
			mp := n.createMountpointPod(mpName)
			n.assign(pv, volumeID, string(uid), mpName)
			target := n.target(uid, pv)
			if _, err := n.client.NodePublishVolume(ctx, publishRequest(volumeID, target, srv.Bucket, uid)); err != nil {
				t.Fatalf("publish: %v", err)
			}
			f, err := os.Open(filepath.Join(target, "dir", "big.txt"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			half := make([]byte, len(content)/2)
			if _, err := io.ReadFull(f, half); err != nil {
				t.Fatal(err)
			}

			first, ending := mp.proc, mp.exited
			next, err := mp.standby(t, true)
			if err != nil {
				t.Fatal(err)
			}
			signal := syscall.SIGKILL
			if tc.handover {
				signal = syscall.SIGTERM
			}
			_ = first.Process.Signal(signal)
			exit := <-ending
			ending <- exit // for the cleanup
			if tc.handover {
				if exit != nil {
					t.Fatalf("the mounter that handed its mount over exited with %v, want status 0", exit)
				}
				n.replaceMountpointPod(ctx, mp, next)
			} else {
				next(mp.commDir)
			}
			rest, err := io.ReadAll(f)
			if err != nil || string(half)+string(rest) != content {
				t.Fatalf("reading on after the mounter was replaced: %d bytes, %v; want the rest of the object; node-agent logs:\n%s",
					len(rest), err, n.logs.all())
			}
			entries, err := os.ReadDir(filepath.Join(target, "dir"))
			if err != nil || len(entries) != 1 {
				t.Fatalf("listing after the mounter was replaced: %v, %v", entries, err)
			}
			if state, _, err := mount.Check(n.kubelet.SourceDir(mpName)); err != nil || state != mount.Mounted {
				t.Fatalf("source state %v, %v; want mounted", state, err)
			}
			select {
			case mp := <-dead:
				t.Fatalf("the source of %s was mounted again: the connection was not resumed", mp)
			default:
			}
			if !strings.Contains(n.logs.all(), "A new mounter took the FUSE connection over") {
				t.Fatalf("the node-agent did not log the handover; logs:\n%s", n.logs.all())
			}
			testenv.Eventually(t, 10*time.Second, "a "+tc.reason+" Event on the workload", func() bool {
				got := eventsOf(ctx, t, workload, tc.reason)
				return len(got) == 1 && strings.Contains(got[0].Message, mpName) && strings.Contains(got[0].Message, tc.message)
			})
		})
	}
}
