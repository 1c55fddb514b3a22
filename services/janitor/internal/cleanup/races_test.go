package cleanup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
)

// addWorkload records uid in the attachment the way the pod-reconciler does: read, append,
// update, again on conflict.
func addWorkload(ctx context.Context, c client.Client, key client.ObjectKey, mp, uid string, at time.Time) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s3pa s3csiv2.MountpointS3PodAttachment
		if err := c.Get(ctx, key, &s3pa); err != nil {
			return err
		}
		withWorkload(mp, uid, at)(&s3pa)
		return c.Update(ctx, &s3pa)
	})
}

// TestLiveWorkloadSurvivesSweepsThatRaceItsCreation adds workloads to an attachment while sweeps
// run back to back. Their attachment times are old, as if the pod-reconciler had been slow, so
// only the janitor's re-read of the API server stands between them and removal, while the
// janitor's cache lags behind the new pods. A sweep that loses conflictAttempts races in a row
// returns the conflict (the next sweep starts over, as in production); on a loaded machine that
// happens, and it is not a failure: losing a live workload is.
func TestLiveWorkloadSurvivesSweepsThatRaceItsCreation(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	node := uniqueName("node")
	mp := mountpointPod(uniqueName("mp"), node)
	h.create(nodeObject(node), mp)
	s3pa := attachment(uniqueName("s3pa"), node, withWorkload(mp.Name, "gone", longAgo))
	h.create(s3pa)

	stop := make(chan struct{})
	sweepErrs := make(chan error, 1)
	var sweeps, lostRaces atomic.Int64
	go func() {
		defer close(sweepErrs)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := h.j.Sweep(h.ctx)
			switch {
			case apierrors.IsConflict(err):
				lostRaces.Add(1)
			case err != nil:
				sweepErrs <- err
				return
			}
			sweeps.Add(1)
		}
	}()
	live := sets.New[string]()
	for i := range 20 {
		pod := workloadPod("default", uniqueName(fmt.Sprintf("racer%d", i)), node)
		h.create(pod)
		if err := addWorkload(h.ctx, h.c, client.ObjectKeyFromObject(s3pa), mp.Name, string(pod.UID), longAgo); err != nil {
			close(stop)
			t.Fatalf("add workload: %v", err)
		}
		live.Insert(string(pod.UID))
	}
	close(stop)
	if err := <-sweepErrs; err != nil {
		t.Fatalf("Sweep() = %v", err)
	}
	h.get(s3pa)
	h.waitCached(s3pa)
	h.sweep()

	if !h.get(s3pa) {
		t.Fatal("attachment deleted while it had live workloads")
	}
	got := sets.New(entries(s3pa)[mp.Name]...)
	if !got.Equal(live) {
		t.Errorf("workloads after %d racing sweeps (%d gave up on conflicts): missing %v, unexpected %v",
			sweeps.Load(), lostRaces.Load(), sets.List(live.Difference(got)), sets.List(got.Difference(live)))
	}
}

func TestConflictingWriteMakesTheJanitorRereadAndKeepTheNewWorkload(t *testing.T) {
	var newcomer atomic.Value // UID of the workload added behind the janitor's back
	var once sync.Once
	node := uniqueName("node")
	h := newHarness(t, harnessOptions{writer: func(w Writer) Writer {
		return hookWriter{Writer: w, before: func(op string, obj client.Object) error {
			s3pa, ok := obj.(*s3csiv2.MountpointS3PodAttachment)
			if !ok || op != "update" || s3pa.Spec.NodeName != node {
				return nil
			}
			var err error
			once.Do(func() {
				pod := workloadPod("default", uniqueName("newcomer"), node)
				if err = env.Client.Create(context.Background(), pod); err != nil {
					return
				}
				newcomer.Store(string(pod.UID))
				err = addWorkload(context.Background(), env.Client, client.ObjectKeyFromObject(s3pa),
					"mp-of-newcomer", string(pod.UID), longAgo)
			})
			return err
		}}
	}})
	live := workloadPod("default", uniqueName("live"), node)
	h.create(nodeObject(node), live)
	s3pa := attachment(uniqueName("s3pa"), node,
		withWorkload("mp-a", "gone", longAgo), withWorkload("mp-a", string(live.UID), longAgo))
	h.create(s3pa)
	h.waitCached(s3pa, live)

	h.sweep()

	h.get(s3pa)
	uid, _ := newcomer.Load().(string)
	if uid == "" {
		t.Fatal("the janitor never updated the attachment")
	}
	want := map[string][]string{"mp-a": {string(live.UID)}, "mp-of-newcomer": {uid}}
	got := entries(s3pa)
	if len(got) != 2 || got["mp-a"][0] != want["mp-a"][0] || len(got["mp-a"]) != 1 || got["mp-of-newcomer"][0] != uid {
		t.Errorf("entries = %v, want %v", got, want)
	}
}

func TestJanitorRestartedMidSweepConverges(t *testing.T) {
	nodes := []string{uniqueName("node"), uniqueName("node"), uniqueName("node")}
	var writes atomic.Int64
	sweepCtx, kill := context.WithCancel(context.Background())
	defer kill()
	first := newHarness(t, harnessOptions{writer: func(w Writer) Writer {
		return hookWriter{Writer: w, before: func(string, client.Object) error {
			if writes.Add(1) > 5 {
				kill() // the process dies here: this write and every later one never happen
				return context.Canceled
			}
			return nil
		}}
	}})
	var all []*s3csiv2.MountpointS3PodAttachment
	for _, node := range nodes {
		first.create(nodeObject(node))
		for range 6 {
			mp := mountpointPod(uniqueName("mp"), node)
			s3pa := attachment(uniqueName("s3pa"), node, withWorkload(mp.Name, "gone-"+mp.Name, longAgo))
			first.create(mp, s3pa)
			all = append(all, s3pa)
		}
	}
	first.waitCached(all[len(all)-1])
	for _, s := range all {
		first.waitCached(s)
	}
	if _, err := first.j.Sweep(sweepCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Sweep() = %v, want it to stop on the cancellation", err)
	}
	remaining := 0
	for _, s := range all {
		if first.get(s) {
			remaining++
		}
	}
	if remaining == 0 || remaining == len(all) {
		t.Fatalf("%d of %d attachments remain after the interrupted sweep, want it interrupted midway", remaining, len(all))
	}

	second := newHarness(t, harnessOptions{})
	second.sweep()
	for _, s := range all {
		if second.get(s) {
			t.Errorf("attachment %s still exists after the restarted janitor swept", s.Name)
		}
	}
	events := func() (n int) {
		for _, node := range nodes {
			n += second.rec.count(node)
		}
		return n
	}
	before := events()
	second.sweep()
	if after := events(); after != before {
		t.Errorf("another sweep published %d more events, want none once converged", after-before)
	}
}

func TestDeletedWorkloadPodIsCleanedWithinSecondsWithoutASweep(t *testing.T) {
	h := newHarness(t, harnessOptions{triggers: true})
	node := uniqueName("node")
	pod := workloadPod("default", uniqueName("w"), node)
	mp := mountpointPod(uniqueName("mp"), node)
	h.create(nodeObject(node), pod, mp)
	s3pa := attachment(uniqueName("s3pa"), node, withWorkload(mp.Name, string(pod.UID), longAgo))
	h.create(s3pa)
	h.waitCached(s3pa, pod)

	start := time.Now()
	if err := h.c.Delete(h.ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("delete workload pod: %v", err)
	}
	h.eventually("attachment deleted", func() error {
		if h.get(s3pa) {
			return errors.New("attachment still exists")
		}
		return nil
	})
	t.Logf("attachment removed %s after its only workload pod was deleted", time.Since(start).Round(time.Millisecond))
	h.eventually("events of the workload and the attachment", func() error {
		if got := h.rec.cleaned(node); len(got) != 2 {
			return fmt.Errorf("cleaned events = %v", got)
		}
		return nil
	})
}

func TestDeletedNodeIsCleanedWhenItsQuarantineEnds(t *testing.T) {
	h := newHarness(t, harnessOptions{triggers: true, cfg: func(c *Config) { c.NodeGoneGrace = time.Second }})
	node := uniqueName("node")
	nodeObj := nodeObject(node)
	mp := mountpointPod(uniqueName("mp"), node)
	h.create(nodeObj, mp)
	s3pa := attachment(uniqueName("s3pa"), node, withWorkload(mp.Name, "w", time.Now()))
	h.create(s3pa)
	h.waitCached(s3pa, nodeObj)

	if err := h.c.Delete(h.ctx, nodeObj); err != nil {
		t.Fatalf("delete node: %v", err)
	}
	h.eventually("attachment and Mountpoint Pod removed", func() error {
		if h.get(s3pa) || h.get(mp) {
			return errors.New("still there")
		}
		return nil
	})
}

func TestVolumeUnpublishedEventTriggersACheckOfItsNode(t *testing.T) {
	h := newHarness(t, harnessOptions{triggers: true})
	node := uniqueName("node")
	h.create(nodeObject(node))
	s3pa := attachment(uniqueName("s3pa"), node, withWorkload("mp-a", "gone", longAgo))
	h.create(s3pa)
	h.waitCached(s3pa)

	e, err := events.New("/test", "", &eventspb.VolumeUnpublished{
		Node: node, VolumeId: "v", WorkloadPodUid: "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11", TargetPath: "/t",
	})
	if err != nil {
		t.Fatalf("build event: %v", err)
	}
	b, err := events.Encode(e)
	if err != nil {
		t.Fatalf("encode event: %v", err)
	}
	d, err := events.Decode(b)
	if err != nil {
		t.Fatalf("decode event: %v", err)
	}
	h.eventually("event handled", func() error { return h.triggers.HandleEvent(h.ctx, d) })
	h.eventually("attachment deleted", func() error {
		if h.get(s3pa) {
			return errors.New("attachment still exists")
		}
		return nil
	})
}
