package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
)

// TestGoneMountpointPodGetsNoNewWorkload: a Mountpoint Pod this process created a moment ago
// is deleted (a drain evicted it and it finished) while its attachment still names it. A
// workload arriving then must get a Mountpoint Pod that exists, not be recorded on the gone
// one because this process remembers creating it: nothing would ever start that pod, and the
// workload would wait in ContainerCreating for ever.
func TestGoneMountpointPodGetsNoNewWorkload(t *testing.T) {
	h := newHarness(t)
	var blockReplace atomic.Bool
	var replaceAttempts atomic.Int64
	var goneName atomic.Value
	goneName.Store("")
	// Hold back the replacement of the gone pod, so the attachment keeps naming a pod that
	// does not exist while the newcomer is assigned (in a cluster the reader has just left, so
	// nothing replaces it at all).
	h.funcs.Create = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*corev1.Pod); ok && obj.GetName() == goneName.Load() && blockReplace.Load() {
			replaceAttempts.Add(1)
			return apierrors.NewServiceUnavailable("held back by the test")
		}
		return c.Create(ctx, obj, opts...)
	}
	h.start()
	pvName := h.volume("data")
	reader := h.workload("reader", h.node, fixture.WithClaim("vol", "data"))
	h.assignedTo(h.node, reader)
	gone := mppod.Name(string(reader.UID), pvName)
	goneName.Store(gone)
	blockReplace.Store(true)
	h.deletePod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.cfg.MountpointNamespace, Name: gone}})
	h.eventually("the deletion is seen and its replacement tried", func() error {
		if replaceAttempts.Load() == 0 {
			return errors.New("no replacement tried yet")
		}
		return nil
	})

	newcomer := h.workload("newcomer", h.node, fixture.WithClaim("vol", "data"))
	a := h.assignedTo(h.node, reader, newcomer)
	if got := findWorkload(a, newcomer.UID); got == gone {
		t.Fatalf("the newcomer was recorded on Mountpoint Pod %s, which no longer exists (attachment %v)",
			gone, a.Spec.MountpointS3PodAttachments)
	}
	mp := &corev1.Pod{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.cfg.MountpointNamespace, Name: findWorkload(a, newcomer.UID)}, mp); err != nil {
		t.Fatalf("the newcomer's Mountpoint Pod: %v", err)
	}
	blockReplace.Store(false)
	h.eventually("the reader's Mountpoint Pod is replaced", func() error {
		return h.c.Get(h.ctx, client.ObjectKey{Namespace: h.cfg.MountpointNamespace, Name: gone}, mp)
	})
}

// TestAttachmentNamingAMissingMountpointPodIsRepaired: an attachment records a live workload on
// a Mountpoint Pod that does not exist (however it came to be: an older driver, a race, a
// hand edit). Nothing would start that pod, so the workload would wait for ever; the
// attachment controller creates it.
func TestAttachmentNamingAMissingMountpointPodIsRepaired(t *testing.T) {
	h := newHarness(t)
	h.start()
	pvName := h.volume("data")
	// Created unscheduled, so the workload controller does not assign it before the
	// attachment below records it.
	w := h.workload("w", "", fixture.WithClaim("vol", "data"))
	missing := mppod.Name("not-a-pod", pvName)
	h.create(fixture.S3PA("s3pa-missing", h.node, pvName, func(a *s3csiv2.MountpointS3PodAttachment) {
		a.Labels = map[string]string{s3csiv2.LabelDriverVersion: testVersion}
		a.Spec.MountpointS3PodAttachments = map[string][]s3csiv2.WorkloadAttachment{
			missing: {{WorkloadPodUID: string(w.UID), AttachmentTime: metav1.Now()}},
		}
	}))
	h.bind(w, h.node)
	h.eventually("the missing Mountpoint Pod is created", func() error {
		mp := &corev1.Pod{}
		if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.cfg.MountpointNamespace, Name: missing}, mp); err != nil {
			return err
		}
		if got := nodeOf(mp); got != h.node {
			return fmt.Errorf("created for node %q, want %q", got, h.node)
		}
		return nil
	})
}
