package csi_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv/testfs"
)

// mountOptions sets the attachment's mount options, as the pod-reconciler derives them from
// the PV (joined by ",").
func mountOptions(flags ...string) func(*s3csiv2.MountpointS3PodAttachmentSpec) {
	return func(s *s3csiv2.MountpointS3PodAttachmentSpec) { s.MountOptions = strings.Join(flags, ",") }
}

func readOnlyKey(s *s3csiv2.MountpointS3PodAttachmentSpec) { s.ReadOnly = true }

// publishedTarget is a workload's target published through the node service.
type publishedTarget struct {
	uid    types.UID
	target string
	mp     string
	// request is the publish that made it.
	request func() *csipb.NodePublishVolumeRequest
}

// publishOnce publishes volume vol-<pv> of pv for a new workload with flags, read-only when
// readOnly, with an attachment whose key matches.
func publishOnce(t *testing.T, n *node, pv string, readOnly bool, flags ...string) publishedTarget {
	t.Helper()
	uid := uuid.NewUUID()
	mpName := mppod.Name(string(uid), pv)
	n.createMountpointPod(mpName)
	keys := []func(*s3csiv2.MountpointS3PodAttachmentSpec){mountOptions(flags...)}
	if readOnly {
		keys = append(keys, readOnlyKey)
	}
	n.assign(pv, "vol-"+pv, string(uid), mpName, keys...)
	target := n.target(uid, pv)
	request := func() *csipb.NodePublishVolumeRequest {
		r := publishRequest("vol-"+pv, target, "bucket-"+pv, uid, flags...)
		r.Readonly = readOnly
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.client.NodePublishVolume(ctx, request()); err != nil {
		t.Fatalf("publish: %v", err)
	}
	return publishedTarget{uid: uid, target: target, mp: mpName, request: request}
}

func TestRepublishWithIncompatibleArgumentsIsAlreadyExistsAndKeepsTheMount(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	rw := publishOnce(t, n, "pv-rw", false, "allow-delete")
	ro := publishOnce(t, n, "pv-ro", true)
	multi := publishOnce(t, n, "pv-multi", false, "allow-delete", "--file-mode=0640")
	tests := []struct {
		name      string
		published publishedTarget
		mutate    func(r *csipb.NodePublishVolumeRequest)
		// wantInMessage are parts of the ALREADY_EXISTS message; none means the republish is
		// compatible and must succeed.
		wantInMessage []string
	}{
		{name: "the same arguments are compatible", published: rw, mutate: func(*csipb.NodePublishVolumeRequest) {}},
		{name: "the same read-only arguments are compatible", published: ro, mutate: func(*csipb.NodePublishVolumeRequest) {}},
		{name: "the same mount options sorted and repeated, as kubelet may send them, are compatible", published: multi,
			mutate: func(r *csipb.NodePublishVolumeRequest) {
				r.VolumeCapability.GetMount().MountFlags = []string{"--file-mode=0640", "allow-delete", "allow-delete"}
			}},
		{name: "new secrets alone are compatible", published: rw, mutate: func(r *csipb.NodePublishVolumeRequest) {
			r.Secrets = map[string]string{"access_key_id": "AKIANEW", "secret_access_key": "new"}
		}},
		{name: "a read-only flag on a read-write target is refused", published: rw,
			mutate:        func(r *csipb.NodePublishVolumeRequest) { r.Readonly = true },
			wantInMessage: []string{"already published read-write", "request is read-only", "unpublish it first"}},
		{name: "a read-only access mode on a read-write target is refused", published: rw,
			mutate: func(r *csipb.NodePublishVolumeRequest) {
				r.VolumeCapability.AccessMode.Mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
			},
			wantInMessage: []string{"already published read-write", "request is read-only"}},
		{name: "a read-only mount option on a read-write target is refused", published: rw,
			mutate: func(r *csipb.NodePublishVolumeRequest) {
				r.VolumeCapability.GetMount().MountFlags = []string{"allow-delete", "read-only"}
			},
			wantInMessage: []string{"already published read-write"}},
		{name: "a read-write request on a read-only target is refused", published: ro,
			mutate:        func(r *csipb.NodePublishVolumeRequest) { r.Readonly = false },
			wantInMessage: []string{"already published read-only", "request is read-write"}},
		{name: "another volume id is refused", published: rw,
			mutate:        func(r *csipb.NodePublishVolumeRequest) { r.VolumeId = "vol-other" },
			wantInMessage: []string{`already holds volume "vol-pv-rw" of PersistentVolume pv-rw`, `"vol-other"`}},
		{name: "other mount options are refused", published: rw,
			mutate: func(r *csipb.NodePublishVolumeRequest) {
				r.VolumeCapability.GetMount().MountFlags = []string{"allow-delete", "--file-mode=0640"}
			},
			wantInMessage: []string{`mount options "allow-delete"`, `"allow-delete,--file-mode=0640"`, "restart the workload pod"}},
		{name: "a missing mount option is refused", published: rw,
			mutate:        func(r *csipb.NodePublishVolumeRequest) { r.VolumeCapability.GetMount().MountFlags = nil },
			wantInMessage: []string{`mount options "allow-delete"`, `request has ""`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := mountOf(t, tt.published.target)
			r := tt.published.request()
			tt.mutate(r)
			_, err := n.client.NodePublishVolume(context.Background(), r)
			switch {
			case len(tt.wantInMessage) == 0 && err != nil:
				t.Fatalf("compatible republish: %v", err)
			case len(tt.wantInMessage) > 0 && status.Code(err) != codes.AlreadyExists:
				t.Fatalf("err = %v, want AlreadyExists", err)
			}
			for _, want := range tt.wantInMessage {
				if !strings.Contains(status.Convert(err).Message(), want) {
					t.Errorf("message %q does not contain %q", status.Convert(err).Message(), want)
				}
			}
			if after := mountOf(t, tt.published.target); after != before {
				t.Fatalf("target mount changed from %s to %s", before, after)
			}
			if got := readFile(t, filepath.Join(tt.published.target, testfs.HelloName)); got != testfs.HelloContent {
				t.Fatalf("target shows %q after the republish", got)
			}
		})
	}
}

func TestRepublishWithoutAnAttachmentChecksTheMountOnly(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	pv, uid := "pv-gone", uuid.NewUUID()
	mpName := mppod.Name(string(uid), pv)
	n.createMountpointPod(mpName)
	s3pa := n.assign(pv, "vol", string(uid), mpName)
	target := n.target(uid, pv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", uid)); err != nil {
		t.Fatalf("publish: %v", err)
	}
	// The pod-reconciler removes a terminating workload from its attachment before kubelet
	// unpublishes it; a republish meanwhile keeps the target.
	if err := apiServer.Client.Delete(ctx, s3pa); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", uid)); err != nil {
		t.Fatalf("republish without an attachment: %v", err)
	}
	r := publishRequest("vol", target, "bucket-b", uid)
	r.Readonly = true
	if _, err := n.client.NodePublishVolume(ctx, r); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("read-only republish of a read-write target without an attachment: err = %v, want AlreadyExists", err)
	}
}

// mountOf identifies the mount at path: mount id and device.
func mountOf(t *testing.T, path string) string {
	t.Helper()
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := table.Lookup(path)
	if !ok {
		t.Fatalf("%s is not mounted", path)
	}
	return fmt.Sprintf("mount %d of %d:%d", e.ID, e.Major, e.Minor)
}

// TestPeriodicRepublishReadsTheAttachmentOnce republishes a target as kubelet does every period:
// the first republish checks the request against the attachment, the later identical ones do
// not read the API server again; a different request is checked again, and after an unpublish
// and a new publish the next republish reads the attachment once more.
func TestPeriodicRepublishReadsTheAttachmentOnce(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	p := publishOnce(t, n, "pv-periodic", false, "allow-delete")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	republish := func(mutate func(*csipb.NodePublishVolumeRequest)) error {
		r := p.request()
		mutate(r)
		_, err := n.client.NodePublishVolume(ctx, r)
		return err
	}
	same := func(*csipb.NodePublishVolumeRequest) {}
	start := n.finds.Load()
	for range 5 {
		if err := republish(same); err != nil {
			t.Fatalf("republish: %v", err)
		}
	}
	if got := n.finds.Load() - start; got != 1 {
		t.Fatalf("5 identical republishes read the attachment %d times, want 1", got)
	}
	if err := republish(func(r *csipb.NodePublishVolumeRequest) { r.VolumeId = "vol-other" }); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("republish with another volume id: %v, want AlreadyExists", err)
	}
	if got := n.finds.Load() - start; got != 2 {
		t.Fatalf("a different request read the attachment %d times in all, want 2", got)
	}
	if _, err := n.client.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol-pv-periodic", TargetPath: p.target}); err != nil {
		t.Fatal(err)
	}
	if err := republish(same); err != nil { // a publish again: the target is not mounted
		t.Fatalf("publish after unpublish: %v", err)
	}
	if err := republish(same); err != nil {
		t.Fatalf("republish: %v", err)
	}
	if got := n.finds.Load() - start; got != 3 {
		t.Fatalf("the first republish after a new publish read the attachment %d times in all, want 3", got)
	}
}
