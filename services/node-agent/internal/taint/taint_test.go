package taint

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/testenv"
)

func TestTheStartupTaintIsRemovedOnlyOnceTheDriverIsInCSINode(t *testing.T) {
	api := testenv.StartAPIServer(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other := corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		other, {Key: Key, Effect: corev1.TaintEffectNoExecute},
	}}}
	if err := api.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if err := api.Client.Create(ctx, csiNode); err != nil {
		t.Fatal(err)
	}
	r := New(api.Client, "node-a", "s3.csi.scality.com")
	if done, _ := r.tryRemove(ctx); done {
		t.Fatal("taint removed before the driver was registered")
	}
	csiNode.Spec.Drivers = []storagev1.CSINodeDriver{{Name: "s3.csi.scality.com", NodeID: "node-a"}}
	if err := api.Client.Update(ctx, csiNode); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var got corev1.Node
	if err := api.Client.Get(ctx, client.ObjectKey{Name: "node-a"}, &got); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, tt := range got.Spec.Taints {
		keys[tt.Key] = true
	}
	if keys[Key] || !keys[other.Key] {
		t.Fatalf("taints = %v, want %s gone and %s kept", got.Spec.Taints, Key, other.Key)
	}
}
