package csi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
	"github.com/s3csi/s3csi/services/node-agent/internal/source"
)

// A pod of the Mountpoint Pod's name that the pod-reconciler did not build (here: another
// image, which would read the keys) gets nothing: the publish fails with FAILED_PRECONDITION
// naming the pod and what to do, no key is written into its comm dir and nothing is mounted.
// When the chart's admission policy is absent, this check is what stands between whoever may
// create pods in the Mountpoint namespace and the volume's keys.
func TestAnImpostorMountpointPodGetsNoKeyAndNoMount(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond,
		driverCreds: credentials.Static{AccessKeyID: "AKID", SecretAccessKey: "the-driver-secret"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, uid := "pv-impostor", uuid.NewUUID()
	mpName := mppod.Name(string(uid), pv)
	pod := fixture.MountpointPod(mpName, n.name, fixture.WithImage("evil.example/steal-keys:1"))
	if err := apiServer.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = apiServer.Client.Delete(context.Background(), pod) })
	pod.Status.Phase = corev1.PodRunning
	if err := apiServer.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	commDir, err := source.CommDir(n.kubelet.Root, string(pod.UID))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(commDir, 0o750); err != nil {
		t.Fatal(err)
	}
	n.assign(pv, "vol", string(uid), mpName)

	_, err = n.client.NodePublishVolume(ctx, publishRequest("vol", n.target(uid, pv), "bucket", uid))
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("publish through an impostor: %v, want FailedPrecondition", err)
	}
	for _, want := range []string{mpName, "was not created by the s3csi pod-reconciler", "evil.example/steal-keys:1", "kubectl delete pod"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(commDir, mppod.CredentialsName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the impostor's comm dir got credentials: %v", err)
	}
	if _, err := os.Stat(n.kubelet.SourceDir(mpName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a source was made for the impostor: %v", err)
	}
}
