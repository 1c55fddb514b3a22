package podwatch

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/s3csi/s3csi/shared/testenv"
)

// A watch that has not caught up (its reflector backs off after the API server was away) must
// not hold a publish: while WaitRunning waits, the direct read finds the Running pod. The watch
// here is real but empty; the direct reader holds what the API server would answer.
func TestWaitRunningReadsTheAPIServerWhenTheWatchIsLate(t *testing.T) {
	api := testenv.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	running := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mp-running", Namespace: "mount-s3"},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	elsewhere := running.DeepCopy()
	elsewhere.Name, elsewhere.Spec.NodeName = "mp-elsewhere", "node-b"
	live := fake.NewClientBuilder().WithScheme(api.Scheme).WithObjects(running, elsewhere).WithStatusSubresource(running, elsewhere).Build()

	w, err := New(api.Config, api.Scheme, "mount-s3", "node-a", live, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.Start(ctx) }()
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("the watch did not sync")
	}
	start := time.Now()
	got, err := w.WaitRunning(ctx, "mp-running")
	if err != nil || got == nil || got.Name != "mp-running" {
		t.Fatalf("WaitRunning = %v, %v; want the Running pod the API server holds", got, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("found after %s, want about one fallback period", took)
	}

	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := w.WaitRunning(short, "mp-elsewhere"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitRunning of a pod of another node = %v, want it waited for as not there", err)
	}
}
