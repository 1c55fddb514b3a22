package reconciler

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
)

// A Mountpoint Pod the scheduler cannot place (no room on the node, S15): its workloads get a
// Warning Event with the scheduler's reason and what to do, instead of waiting silently in
// ContainerCreating until kubelet's mount times out. The node-agent cannot tell: its watch
// holds only the pods scheduled to its node.
func TestAnUnschedulableMountpointPodIsReportedOnItsWorkloads(t *testing.T) {
	h := newHarness(t)
	h.start()
	pvName := h.volume("data")
	pod := h.workload("app", h.node, fixture.WithClaim("vol", "data"))
	h.assignedTo(h.node, pod)
	mp := &corev1.Pod{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.cfg.MountpointNamespace, Name: mppod.Name(string(pod.UID), pvName)}, mp); err != nil {
		t.Fatal(err)
	}
	const why = "0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
	mp.Status.Conditions = []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: why, LastTransitionTime: metav1.Now(),
	}}
	if err := h.c.Status().Update(h.ctx, mp); err != nil {
		t.Fatal(err)
	}
	h.eventually("the workload has a Warning Event with the scheduler's reason", func() error {
		list := &corev1.EventList{}
		if err := h.c.List(h.ctx, list, client.InNamespace(h.ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.UID != pod.UID || e.Type != corev1.EventTypeWarning || e.Reason != "MountpointPodUnschedulable" {
				continue
			}
			for _, want := range []string{mp.Name, pvName, h.node, why, "kubectl describe pod -n " + mp.Namespace + " " + mp.Name} {
				if !strings.Contains(e.Message, want) {
					return fmt.Errorf("event %q does not say %q", e.Message, want)
				}
			}
			return nil
		}
		return fmt.Errorf("no MountpointPodUnschedulable event among %d", len(list.Items))
	})

	// The workload goes: the Mountpoint Pod never ran, so nothing will make it exit; it is
	// deleted rather than left Pending for ever.
	h.deletePod(pod)
	h.eventually("the unscheduled Mountpoint Pod is deleted with its attachment", func() error {
		if n := len(h.attachments(h.node)); n != 0 {
			return fmt.Errorf("%d attachments remain", n)
		}
		err := h.c.Get(h.ctx, client.ObjectKeyFromObject(mp), &corev1.Pod{})
		if err == nil {
			return errors.New("the Mountpoint Pod remains")
		}
		return client.IgnoreNotFound(err)
	})
}
