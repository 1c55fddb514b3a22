package csi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/mppod"
)

// A Mountpoint Pod whose container kubelet cannot start: the publish fails within seconds, not
// at kubelet's deadline, with kubelet's reason and the pod to describe, so the workload's
// FailedMount event says what to fix instead of a silent ContainerCreating. (One the scheduler
// cannot place never reaches this node's watch: the pod-reconciler reports it.)
func TestPublishSaysWhyTheMountpointPodDoesNotRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status corev1.PodStatus
		want   []string
	}{
		{
			name: "kubelet cannot start its container",
			status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
				Name: "mountpoint", Image: "s3csi/mounter:x",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
					Reason: "ErrImageNeverPull", Message: `Container image "s3csi/mounter:x" is not present with pull policy of Never`,
				}},
			}}},
			want: []string{"cannot start", "ErrImageNeverPull", "is not present with pull policy of Never", "image.repositories.mounter"},
		},
		{
			name: "kubelet refuses its configuration",
			status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
				Name: "mountpoint", Image: "s3csi/mounter:x",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
					Reason: "CreateContainerConfigError", Message: `secret "missing" not found`,
				}},
			}}},
			want: []string{"cannot start", "CreateContainerConfigError", `secret "missing" not found`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			pv, uid := "pv-pending", uuid.NewUUID()
			mpName := mppod.Name(string(uid), pv)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: mpName, Namespace: mppod.DefaultNamespace},
				Spec:       corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{Name: "mountpoint", Image: "s3csi/mounter:x"}}},
			}
			if err := apiServer.Client.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = apiServer.Client.Delete(context.Background(), pod) })
			pod.Status = tc.status
			if err := apiServer.Client.Status().Update(ctx, pod); err != nil {
				t.Fatal(err)
			}
			n.assign(pv, "vol", string(uid), mpName)

			start := time.Now()
			_, err := n.client.NodePublishVolume(ctx, publishRequest("vol", n.target(uid, pv), "bucket", uid))
			took := time.Since(start)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("err = %v after %s, want Unavailable", err, took)
			}
			for _, want := range append(tc.want, mpName, "kubectl describe pod -n "+mppod.DefaultNamespace+" "+mpName) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if took > 10*time.Second {
				t.Errorf("the publish failed after %s: kubelet would show nothing until then", took)
			}
		})
	}
}
