package reconciler

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
)

// TestTerminatingMountpointPodGetsNoNewWorkload deletes a running Mountpoint Pod (a drain, an
// eviction, an operator) while its workload still reads: the pod stays Terminating for its
// grace period and keeps the workload it serves; a workload arriving meanwhile gets a new
// Mountpoint Pod; once the reader ends, the terminating pod is marked needs-unmount (so the
// node-agent unmounts it and the mounter exits) and never replaced.
func TestTerminatingMountpointPodGetsNoNewWorkload(t *testing.T) {
	h := newHarness(t)
	h.start()
	pvName := h.volume("data")
	reader := h.workload("reader", h.node, fixture.WithClaim("vol", "data"))
	h.assignedTo(h.node, reader)
	old := &corev1.Pod{}
	key := client.ObjectKey{Namespace: h.cfg.MountpointNamespace, Name: mppod.Name(string(reader.UID), pvName)}
	if err := h.c.Get(h.ctx, key, old); err != nil {
		t.Fatal(err)
	}
	// As on a node: scheduled and running, so the API server deletes it gracefully.
	h.bind(old, h.node)
	h.setPhase(old.Namespace, old.Name, corev1.PodRunning, "")
	if err := h.c.Delete(h.ctx, old); err != nil {
		t.Fatal(err)
	}
	terminating := &corev1.Pod{}
	if err := h.c.Get(h.ctx, key, terminating); err != nil {
		t.Fatalf("the deleted Mountpoint Pod is gone at once, not Terminating: %v", err)
	}
	want := int64(DefaultTerminationGracePeriod / time.Second)
	if terminating.DeletionTimestamp == nil || terminating.DeletionGracePeriodSeconds == nil || *terminating.DeletionGracePeriodSeconds != want {
		t.Fatalf("deletion timestamp %v, grace period %v; want Terminating with %ds", terminating.DeletionTimestamp,
			terminating.DeletionGracePeriodSeconds, want)
	}

	newcomer := h.workload("newcomer", h.node, fixture.WithClaim("vol", "data"))
	a := h.assignedTo(h.node, reader, newcomer)
	fresh := mppod.Name(string(newcomer.UID), pvName)
	if got := a.Spec.MountpointS3PodAttachments[old.Name]; len(got) != 1 || got[0].WorkloadPodUID != string(reader.UID) {
		t.Errorf("the Terminating Mountpoint Pod records %v, want the reader only", got)
	}
	if got := a.Spec.MountpointS3PodAttachments[fresh]; len(got) != 1 || got[0].WorkloadPodUID != string(newcomer.UID) {
		t.Errorf("Mountpoint Pod %s records %v, want the newcomer (attachment %v)", fresh, got, a.Spec.MountpointS3PodAttachments)
	}
	mp := &corev1.Pod{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.cfg.MountpointNamespace, Name: fresh}, mp); err != nil {
		t.Fatalf("no new Mountpoint Pod for the newcomer: %v", err)
	}
	if err := h.c.Get(h.ctx, key, mp); err != nil || mp.UID != old.UID || mp.Annotations[mppod.AnnotationNeedsUnmount] != "" {
		t.Fatalf("the Terminating Mountpoint Pod serving the reader was touched: %v, %v", mp.ObjectMeta, err)
	}

	h.deletePod(reader)
	h.assignedTo(h.node, newcomer)
	h.eventually("the Terminating Mountpoint Pod is marked needs-unmount", func() error {
		if err := h.c.Get(h.ctx, key, mp); err != nil {
			return err
		}
		if mp.UID != old.UID {
			return errors.New("it was replaced")
		}
		if mp.Annotations[mppod.AnnotationNeedsUnmount] != needsUnmountValue {
			return fmt.Errorf("annotations %v", mp.Annotations)
		}
		return nil
	})
}
