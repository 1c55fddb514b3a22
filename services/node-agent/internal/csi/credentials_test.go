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
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv/testfs"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

func TestRepublishRotatesVolumeCredentialsWithoutRemountAndNeverLogsThem(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, uid := "pv-rotate", string(uuid.NewUUID())
	mpName := mppod.Name(uid, pv)
	n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	target := n.target(uuidOf(uid), pv)
	publish := func(ak, sk string) {
		t.Helper()
		req := publishRequest("vol", target, "bucket-b", uuidOf(uid))
		req.VolumeContext["authenticationSource"] = "secret"
		req.Secrets = map[string]string{"access_key_id": ak, "secret_access_key": sk}
		if _, err := n.client.NodePublishVolume(ctx, req); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	sourceDevice := func() string {
		t.Helper()
		table, err := mount.ReadTable()
		if err != nil {
			t.Fatal(err)
		}
		e, ok := table.Lookup(n.kubelet.SourceDir(mpName))
		if !ok {
			t.Fatal("source not mounted")
		}
		return fmt.Sprintf("%d:%d", e.Major, e.Minor)
	}
	const firstSecret, secondSecret = "firstCanarySecret/abc+def=", "secondCanarySecret/xyz+uvw="
	publish("AKIAFIRST0000000", firstSecret)
	before := sourceDevice()
	if got := readFile(t, filepath.Join(target, testfs.ProfileName)); !strings.Contains(got, "AKIAFIRST0000000") {
		t.Fatalf("the filesystem sees %q, want the first key", got)
	}
	publish("AKIASECOND000000", secondSecret) // kubelet's periodic republish after a rotation
	if got := readFile(t, filepath.Join(target, testfs.ProfileName)); !strings.Contains(got, "AKIASECOND000000") {
		t.Fatalf("the filesystem sees %q after rotation, want the second key", got)
	}
	if sourceDevice() != before {
		t.Fatal("rotation remounted the source")
	}
	logs := n.logs.all()
	for _, secret := range []string{firstSecret, secondSecret} {
		if strings.Contains(logs, secret) {
			t.Fatalf("secret %q reached the logs", secret)
		}
	}
}

func TestVolumeMountGroupGivesTheWorkloadGroupAccess(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, uid := "pv-fsgroup", string(uuid.NewUUID())
	mpName := mppod.Name(uid, pv)
	n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	target := n.target(uuidOf(uid), pv)
	req := publishRequest("vol", target, "bucket-b", uuidOf(uid), "--file-mode=0640")
	req.VolumeCapability.GetMount().VolumeMountGroup = "3000"
	if _, err := n.client.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	args := strings.Split(readFile(t, filepath.Join(target, testfs.ArgsName)), "\n")
	for _, want := range []string{"--gid=3000", "--allow-other", "--dir-mode=770", "--file-mode=0640"} {
		found := false
		for _, a := range args {
			found = found || a == want
		}
		if !found {
			t.Errorf("mounter args %q lack %q", args, want)
		}
	}
}

// TestSecretAuthenticationWithoutNodePublishSecretUsesTheDriverCredentials covers volumes of a
// StorageClass that names only a provisioner secret: kubelet sends no secret, and the volume
// mounts with the driver's credentials, as under the Scality v2 driver.
func TestSecretAuthenticationWithoutNodePublishSecretUsesTheDriverCredentials(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond,
		driverCreds: credentials.Static{AccessKeyID: "AKIADRIVER000000", SecretAccessKey: "driverSecret"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, uid := "pv-provisioner-secret", string(uuid.NewUUID())
	mpName := mppod.Name(uid, pv)
	n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	target := n.target(uuidOf(uid), pv)
	req := publishRequest("vol", target, "bucket-p", uuidOf(uid))
	req.VolumeContext["authenticationSource"] = "secret"
	if _, err := n.client.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if got := readFile(t, filepath.Join(target, testfs.ProfileName)); !strings.Contains(got, "AKIADRIVER000000") {
		t.Fatalf("the filesystem sees %q, want the driver's key", got)
	}
}

func TestARejectedPublishNeverReturnsOrLogsItsSecret(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, uid := "pv-rejected", string(uuid.NewUUID())
	mpName := mppod.Name(uid, pv)
	n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	const secret = "rejectedCanarySecret/abc+def="
	tests := []struct {
		name   string
		modify func(*csipb.NodePublishVolumeRequest)
	}{
		{
			name:   "a request without a target path",
			modify: func(r *csipb.NodePublishVolumeRequest) { r.TargetPath = "" },
		},
		{
			name: "secrets that name no access key id",
			modify: func(r *csipb.NodePublishVolumeRequest) {
				r.Secrets = map[string]string{"key_id": secret, "secret_access_key": secret}
			},
		},
		{
			name: "secrets without a secret access key",
			modify: func(r *csipb.NodePublishVolumeRequest) {
				r.Secrets = map[string]string{"access_key_id": secret}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := publishRequest("vol", n.target(uuidOf(uid), pv), "bucket-b", uuidOf(uid))
			req.VolumeContext["authenticationSource"] = "secret"
			req.Secrets = map[string]string{"access_key_id": "AKIAREJECTED0000", "secret_access_key": secret}
			tt.modify(req)
			_, err := n.client.NodePublishVolume(ctx, req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("NodePublishVolume() = %v, want InvalidArgument", err)
			}
			if strings.Contains(status.Convert(err).Message(), secret) {
				t.Errorf("NodePublishVolume() returned the secret: %v", err)
			}
		})
	}
	if logs := n.logs.all(); strings.Contains(logs, secret) || !strings.Contains(logs, "RPC failed") {
		t.Errorf("the logs show the secret or no failure:\n%s", logs)
	}
}
