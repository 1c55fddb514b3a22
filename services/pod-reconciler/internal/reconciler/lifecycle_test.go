package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
)

func TestEndedWorkloadIsCleanedUp(t *testing.T) {
	tests := []struct {
		name string
		end  func(h *harness, pod *corev1.Pod)
	}{
		{name: "a workload that succeeded is removed", end: func(h *harness, p *corev1.Pod) { h.setPhase(p.Namespace, p.Name, corev1.PodSucceeded, "") }},
		{name: "a workload that failed is removed", end: func(h *harness, p *corev1.Pod) { h.setPhase(p.Namespace, p.Name, corev1.PodFailed, "") }},
		{name: "a deleted workload is removed", end: func(h *harness, p *corev1.Pod) { h.deletePod(p) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.start()
			pvName := h.volume("data")
			stays := h.workload("stays", h.node, fixture.WithClaim("vol", "data"))
			ends := h.workload("ends", h.node, fixture.WithClaim("vol", "data"))
			h.assignedTo(h.node, stays, ends)
			mpName := mppod.Name(string(stays.UID), pvName)
			if a := h.attachments(h.node)[0]; len(a.Spec.MountpointS3PodAttachments) != 1 {
				t.Fatalf("attachment %v", a.Spec.MountpointS3PodAttachments)
			}
			if _, ok := h.attachments(h.node)[0].Spec.MountpointS3PodAttachments[mpName]; !ok {
				mpName = mppod.Name(string(ends.UID), pvName)
			}

			tt.end(h, ends)
			h.assignedTo(h.node, stays)
			h.deletePod(stays)
			h.eventually("the empty attachment is deleted", func() error {
				if as := h.attachments(h.node); len(as) != 0 {
					return fmt.Errorf("%d attachments left", len(as))
				}
				return nil
			})
			mp := &corev1.Pod{}
			if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.cfg.MountpointNamespace, Name: mpName}, mp); err != nil {
				t.Fatal(err)
			}
			if mp.Annotations[mppod.AnnotationNeedsUnmount] != "true" {
				t.Errorf("Mountpoint Pod annotations %v, want needs-unmount", mp.Annotations)
			}
			h.eventually("mountpoint.needs-unmount is on the bus", func() error {
				evs := h.busEvents(events.TypeMountpointNeedsUnmount, h.node)
				if len(evs) != 1 {
					return fmt.Errorf("%d needs-unmount events, want 1", len(evs))
				}
				p := evs[0].Payload.(*eventspb.MountpointNeedsUnmount)
				if p.MountpointPodName != mpName || p.MountpointPodUid != string(mp.UID) || p.PvName != pvName {
					return fmt.Errorf("payload %v", p)
				}
				return nil
			})

			// The node-agent unmounts; the mounter exits 0.
			h.setPhase(mp.Namespace, mp.Name, corev1.PodSucceeded, "")
			h.eventually("the finished Mountpoint Pod is deleted", func() error {
				if mps := h.mountpointPods(); len(mps) != 0 {
					return fmt.Errorf("%d Mountpoint Pods left", len(mps))
				}
				return nil
			})
		})
	}
}

func TestFirstWorkloadEndsBeforeItsAttachmentWhileTenArrive(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.volume("data")
	first := fixture.Pod("first", fixture.InNamespace(h.ns), fixture.WithClaim("vol", "data"))
	h.create(first)
	// It fails before the scheduler's binding is even seen by the reconciler, and is gone soon.
	h.bind(first, h.node)
	h.setPhase(h.ns, "first", corev1.PodFailed, "")
	var pods []*corev1.Pod
	for i := range 10 {
		pods = append(pods, h.workload(fmt.Sprintf("next-%d", i), h.node, fixture.WithClaim("vol", "data")))
	}
	h.deletePod(first)
	a := h.assignedTo(h.node, pods...)
	if n := len(a.Spec.MountpointS3PodAttachments); n != 1 {
		t.Errorf("ten workloads use %d Mountpoint Pods, want 1", n)
	}
}

// watchMax watches a list type and reports the largest number of objects matching keep that
// existed at once, until stop is closed.
func watchMax(t testing.TB, h *harness, list client.ObjectList, keep func(watch.Event) (string, bool)) (highestSeen func() int, stop func()) {
	t.Helper()
	wc, err := client.NewWithWatch(api.Config, client.Options{Scheme: api.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(h.ctx, list)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	live := map[string]bool{}
	highest := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			name, ok := keep(ev)
			if !ok {
				continue
			}
			mu.Lock()
			if ev.Type == watch.Deleted {
				delete(live, name)
			} else {
				live[name] = true
			}
			highest = max(highest, len(live))
			mu.Unlock()
		}
	}()
	return func() int {
			mu.Lock()
			defer mu.Unlock()
			return highest
		}, func() {
			w.Stop()
			<-done
		}
}

func TestFiftyWorkloadsOnOneVolumeAndNodeGetOneMountpointPod(t *testing.T) {
	h := newHarness(t)
	h.cfg.MaxConcurrentReconciles = 8
	h.start()
	h.volume("data")
	maxS3PAs, stopS3PAs := watchMax(t, h, &s3csiv2.MountpointS3PodAttachmentList{}, func(ev watch.Event) (string, bool) {
		a, ok := ev.Object.(*s3csiv2.MountpointS3PodAttachment)
		if !ok {
			return "", false
		}
		return a.Name, a.Spec.NodeName == h.node
	})
	maxMPs, stopMPs := watchMax(t, h, &corev1.PodList{}, func(ev watch.Event) (string, bool) {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return "", false
		}
		return p.Name, p.Namespace == h.cfg.MountpointNamespace
	})
	var pods []*corev1.Pod
	for i := range 50 {
		pods = append(pods, fixture.Pod(fmt.Sprintf("replica-%d", i), fixture.InNamespace(h.ns), fixture.WithClaim("vol", "data")))
		h.create(pods[i])
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	for _, p := range pods {
		wg.Go(func() {
			if err := h.c.SubResource("binding").Create(h.ctx, p, fixture.Binding(p, h.node)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("bind: %v", err)
	}
	h.assignedTo(h.node, pods...)
	time.Sleep(200 * time.Millisecond) // let the watches catch up
	stopS3PAs()
	stopMPs()
	if n := maxS3PAs(); n != 1 {
		t.Errorf("at most %d attachments existed at once, want 1", n)
	}
	if n := maxMPs(); n != 1 {
		t.Errorf("at most %d Mountpoint Pods existed at once, want 1", n)
	}
}

func TestLostMountpointPodIsReplaced(t *testing.T) {
	tests := []struct {
		name string
		lose func(h *harness, mp *corev1.Pod)
	}{
		{name: "a Mountpoint Pod the kubelet evicted is replaced", lose: func(h *harness, mp *corev1.Pod) {
			h.bind(mp, h.node)
			h.setPhase(mp.Namespace, mp.Name, corev1.PodFailed, "Evicted")
		}},
		{name: "a Mountpoint Pod a drain deleted is replaced", lose: func(h *harness, mp *corev1.Pod) { h.deletePod(mp) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.start()
			pvName := h.volume("data")
			pod := h.workload("app", h.node, fixture.WithClaim("vol", "data"))
			h.assignedTo(h.node, pod)
			mpName := mppod.Name(string(pod.UID), pvName)
			old := &corev1.Pod{}
			if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.cfg.MountpointNamespace, Name: mpName}, old); err != nil {
				t.Fatal(err)
			}
			tt.lose(h, old)

			h.eventually("a new Mountpoint Pod of the same name replaces it", func() error {
				mp := &corev1.Pod{}
				if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(old), mp); err != nil {
					return err
				}
				if mp.UID == old.UID {
					return errors.New("still the lost pod")
				}
				return nil
			})
			h.eventually("the workload has a Warning Event naming the cause", func() error {
				list := &corev1.EventList{}
				if err := h.c.List(h.ctx, list, client.InNamespace(h.ns)); err != nil {
					return err
				}
				for _, e := range list.Items {
					if e.InvolvedObject.UID == pod.UID && e.Type == corev1.EventTypeWarning && e.Reason == "MountpointPodReplaced" {
						return nil
					}
				}
				return fmt.Errorf("no MountpointPodReplaced event among %d", len(list.Items))
			})
			h.assignedTo(h.node, pod)
		})
	}
}

// failing makes the first n calls of one kind of write fail with err, then lets them through.
type failing struct {
	mu sync.Mutex
	n  int
}

func (f *failing) take() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return false
	}
	f.n--
	return true
}

func TestInjectedFailuresAreRetriedWithoutDuplicatesOrFalseEvents(t *testing.T) {
	h := newHarness(t)
	gr := schema.GroupResource{Group: s3csiv2.GroupVersion.Group, Resource: "mountpoints3podattachments"}
	createFails, updateConflicts, patchConflicts := &failing{n: 2}, &failing{n: 3}, &failing{n: 2}
	h.funcs.Create = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*s3csiv2.MountpointS3PodAttachment); ok && createFails.take() {
			return apierrors.NewServiceUnavailable("injected")
		}
		return c.Create(ctx, obj, opts...)
	}
	h.funcs.Update = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		if _, ok := obj.(*s3csiv2.MountpointS3PodAttachment); ok && updateConflicts.take() {
			return apierrors.NewConflict(gr, obj.GetName(), errors.New("injected"))
		}
		return c.Update(ctx, obj, opts...)
	}
	h.funcs.Patch = func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*corev1.Pod); ok && patchConflicts.take() {
			return apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, obj.GetName(), errors.New("injected"))
		}
		return c.Patch(ctx, obj, patch, opts...)
	}
	h.start()
	h.volume("data")
	p1 := h.workload("one", h.node, fixture.WithClaim("vol", "data"))
	a := h.assignedTo(h.node, p1)
	p2 := h.workload("two", h.node, fixture.WithClaim("vol", "data"))
	h.assignedTo(h.node, p1, p2)
	if n := len(h.mountpointPods()); n != 1 {
		t.Errorf("%d Mountpoint Pods after failed attachment creates, want 1 (the failed ones' deleted)", n)
	}
	h.eventually("one attachment.assigned per workload, naming the attachment that exists", func() error {
		evs := h.busEvents(events.TypeAttachmentAssigned, h.node)
		var got []string
		for _, e := range evs {
			p := e.Payload.(*eventspb.AttachmentAssigned)
			if p.AttachmentName != a.Name {
				return fmt.Errorf("event names attachment %q, want %q", p.AttachmentName, a.Name)
			}
			got = append(got, p.WorkloadPodUid)
		}
		slices.Sort(got)
		if want := uidsOf(p1, p2); !slices.Equal(got, want) {
			return fmt.Errorf("events for %v, want %v", got, want)
		}
		return nil
	})

	// Both end: the needs-unmount patch conflicts twice, then succeeds; one event follows it.
	h.deletePod(p1)
	h.deletePod(p2)
	h.eventually("the attachment is deleted", func() error {
		if as := h.attachments(h.node); len(as) != 0 {
			return fmt.Errorf("%d attachments left", len(as))
		}
		return nil
	})
	mp := h.mountpointPods()[0]
	if mp.Annotations[mppod.AnnotationNeedsUnmount] != "true" {
		t.Errorf("Mountpoint Pod not marked needs-unmount: %v", mp.Annotations)
	}
	h.eventually("exactly one needs-unmount event", func() error {
		if n := len(h.busEvents(events.TypeMountpointNeedsUnmount, h.node)); n != 1 {
			return fmt.Errorf("%d needs-unmount events, want 1", n)
		}
		return nil
	})
	if createFails.n != 0 || updateConflicts.n != 0 || patchConflicts.n != 0 {
		t.Errorf("not every injected failure was hit: create %d, update %d, patch %d", createFails.n, updateConflicts.n, patchConflicts.n)
	}
}

func TestAttachmentDeletedUnderneathIsRecreatedByTheResync(t *testing.T) {
	h := newHarness(t)
	h.cfg.ResyncPeriod = time.Second
	deleteOnce := &failing{n: 1}
	h.funcs.Update = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		if _, ok := obj.(*s3csiv2.MountpointS3PodAttachment); ok && deleteOnce.take() {
			// Another actor deletes the S3PA just before this update: the API server answers NotFound.
			if err := c.Delete(ctx, obj); err != nil {
				return err
			}
		}
		return c.Update(ctx, obj, opts...)
	}
	h.start()
	h.volume("data")
	p1 := h.workload("one", h.node, fixture.WithClaim("vol", "data"))
	h.assignedTo(h.node, p1)
	p2 := h.workload("two", h.node, fixture.WithClaim("vol", "data"))
	h.assignedTo(h.node, p1, p2)
	if deleteOnce.n != 0 {
		t.Error("the deletion was not injected")
	}
}

func TestDuplicateAttachmentsAreRepaired(t *testing.T) {
	h := newHarness(t)
	pvName := h.volume("data")
	p1 := h.workload("one", h.node, fixture.WithClaim("vol", "data"))
	// Two S3PAs of one key, as two replicas racing during a leader handover could leave them.
	populated := fixture.S3PA("", h.node, pvName, fixture.WithWorkloads("mp-old", string(p1.UID)), fixture.WithDriverVersionLabel(testVersion))
	populated.GenerateName = "s3pa-"
	h.create(populated)
	for range 2 {
		empty := fixture.S3PA("", h.node, pvName, fixture.WithDriverVersionLabel(testVersion))
		empty.GenerateName = "s3pa-"
		empty.Spec.MountpointS3PodAttachments = map[string][]s3csiv2.WorkloadAttachment{"mp-gone": nil}
		h.create(empty)
	}
	h.start()
	p2 := h.workload("two", h.node, fixture.WithClaim("vol", "data"))
	a := h.assignedTo(h.node, p1, p2)
	if a.Name != populated.Name {
		t.Errorf("kept attachment %s, want the populated %s", a.Name, populated.Name)
	}
}

func TestRestartedReconcilerConvergesWithoutDuplicates(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.volume("data")
	var pods []*corev1.Pod
	for i := range 5 {
		pods = append(pods, h.workload(fmt.Sprintf("before-%d", i), h.node, fixture.WithClaim("vol", "data")))
	}
	h.assignedTo(h.node, pods...)
	h.stopManager()
	for i := range 5 {
		pods = append(pods, h.workload(fmt.Sprintf("between-%d", i), h.node, fixture.WithClaim("vol", "data")))
	}
	h.start()
	for i := range 5 {
		pods = append(pods, h.workload(fmt.Sprintf("after-%d", i), h.node, fixture.WithClaim("vol", "data")))
	}
	h.assignedTo(h.node, pods...)
	if n := len(h.mountpointPods()); n != 1 {
		t.Errorf("%d Mountpoint Pods, want 1", n)
	}
	h.eventually("one attachment.assigned per workload across the restart", func() error {
		evs := h.busEvents(events.TypeAttachmentAssigned, h.node)
		if len(evs) != len(pods) {
			return fmt.Errorf("%d events for %d workloads", len(evs), len(pods))
		}
		return nil
	})
}

func TestNATSDownDelaysEventsButNotAttachments(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.volume("data")
	h.nats.Stop()
	pod := h.workload("app", h.node, fixture.WithClaim("vol", "data"))
	h.assignedTo(h.node, pod)
	h.nats.Restart(t)
	h.eventually("the event of the write made while NATS was down is published", func() error {
		if n := len(h.busEvents(events.TypeAttachmentAssigned, h.node)); n != 1 {
			return fmt.Errorf("%d attachment.assigned events, want 1", n)
		}
		return nil
	})
}
