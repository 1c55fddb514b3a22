package cleanup

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/mppod"
)

// entries returns the workload UIDs per Mountpoint Pod of a, sorted.
func entries(a *s3csiv2.MountpointS3PodAttachment) map[string][]string {
	out := map[string][]string{}
	for mp, ws := range a.Spec.MountpointS3PodAttachments {
		for _, w := range ws {
			out[mp] = append(out[mp], w.WorkloadPodUID)
		}
		slices.Sort(out[mp])
	}
	return out
}

func TestGoneWorkloadIsRemovedAndItsMountpointPodAskedToUnmount(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	node := uniqueName("node")
	live := workloadPod("default", uniqueName("live"), node)
	h.create(nodeObject(node), live)
	mpShared, mpAlone := mountpointPod(uniqueName("mp"), node), mountpointPod(uniqueName("mp"), node)
	h.create(mpShared, mpAlone)
	s3pa := attachment(uniqueName("s3pa"), node,
		withWorkload(mpShared.Name, "gone-1", longAgo), withWorkload(mpShared.Name, string(live.UID), longAgo),
		withWorkload(mpAlone.Name, "gone-2", longAgo))
	h.create(s3pa)
	h.waitCached(s3pa, live)

	h.sweep()

	if !h.get(s3pa) {
		t.Fatal("attachment deleted, want it kept for the live workload")
	}
	want := map[string][]string{mpShared.Name: {string(live.UID)}}
	if got := entries(s3pa); len(got) != 1 || !slices.Equal(got[mpShared.Name], want[mpShared.Name]) {
		t.Errorf("entries = %v, want %v", got, want)
	}
	h.get(mpAlone)
	if mpAlone.Annotations[mppod.AnnotationNeedsUnmount] != "true" || mpAlone.Annotations[AnnotationNeedsUnmountSince] == "" {
		t.Errorf("Mountpoint Pod left without workloads has annotations %v, want needs-unmount and since", mpAlone.Annotations)
	}
	h.get(mpShared)
	if _, ok := mpShared.Annotations[mppod.AnnotationNeedsUnmount]; ok {
		t.Error("Mountpoint Pod still serving a workload was asked to unmount")
	}
	cleaned := h.rec.cleaned(node)
	if len(cleaned) != 2 {
		t.Fatalf("attachment.cleaned events = %v, want one per gone workload", cleaned)
	}
	for _, c := range cleaned {
		if c.Reason != ReasonWorkloadGone || c.Node != node || c.AttachmentName != s3pa.Name || c.WorkloadPodUid == string(live.UID) {
			t.Errorf("event %v, want reason %s about a gone workload of %s on %s", c, ReasonWorkloadGone, s3pa.Name, node)
		}
	}
	if reqs := h.rec.unmountRequests(node); len(reqs) != 1 || reqs[0].MountpointPodName != mpAlone.Name || reqs[0].Node != node {
		t.Errorf("needs-unmount events = %v, want one for %s on %s", reqs, mpAlone.Name, node)
	}

	before := h.rec.count(node)
	h.sweep()
	if h.rec.count(node) != before {
		t.Errorf("a second sweep published %d more events, want none (idempotent)", h.rec.count(node)-before)
	}
}

func TestAttachmentWithEveryWorkloadGoneIsDeleted(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	node := uniqueName("node")
	mp := mountpointPod(uniqueName("mp"), node)
	h.create(nodeObject(node), mp)
	s3pa := attachment(uniqueName("s3pa"), node, withWorkload(mp.Name, "gone", longAgo))
	h.create(s3pa)
	h.waitCached(s3pa)

	h.sweep()

	if h.get(s3pa) {
		t.Fatalf("attachment still exists with %v, want it deleted", entries(s3pa))
	}
	h.get(mp)
	if mp.Annotations[mppod.AnnotationNeedsUnmount] != "true" {
		t.Errorf("Mountpoint Pod annotations = %v, want needs-unmount", mp.Annotations)
	}
	reasons := map[string]int{}
	for _, c := range h.rec.cleaned(node) {
		reasons[c.Reason]++
	}
	if reasons[ReasonWorkloadGone] != 1 || reasons[ReasonEmptyAttachment] != 1 {
		t.Errorf("cleaned reasons = %v, want one %s and one %s", reasons, ReasonWorkloadGone, ReasonEmptyAttachment)
	}
}

func TestEmptyAttachmentIsDeletedOnlyOnceOld(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	node := uniqueName("node")
	h.create(nodeObject(node))
	s3pa := attachment(uniqueName("s3pa"), node)
	h.create(s3pa)
	h.waitCached(s3pa)

	h.sweep()
	if !h.get(s3pa) {
		t.Fatal("a young empty attachment was deleted, want it kept until StaleAfter")
	}

	h.clock.Advance(2 * time.Minute)
	h.sweep()
	if h.get(s3pa) {
		t.Fatal("an old empty attachment still exists, want it deleted")
	}
	if c := h.rec.cleaned(node); len(c) != 1 || c[0].Reason != ReasonEmptyAttachment || c[0].AttachmentName != s3pa.Name {
		t.Errorf("cleaned events = %v, want one %s for %s", c, ReasonEmptyAttachment, s3pa.Name)
	}
}

func TestUnreferencedMountpointPodIsAskedToUnmountThenDeletedOnceFinished(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	node := uniqueName("node")
	mp := mountpointPod(uniqueName("mp"), node, scheduledByAffinity)
	foreign := mountpointPod(uniqueName("other"), node, withoutDriverLabel)
	h.create(nodeObject(node), mp, foreign)
	h.waitCached(mp)

	h.sweep()
	h.get(mp)
	if _, ok := mp.Annotations[mppod.AnnotationNeedsUnmount]; ok {
		t.Fatal("a young Mountpoint Pod (its attachment may be on the way) was asked to unmount")
	}

	h.clock.Advance(2 * time.Minute)
	h.sweep()
	h.get(mp)
	if mp.Annotations[mppod.AnnotationNeedsUnmount] != "true" {
		t.Fatalf("annotations = %v, want needs-unmount on an old unreferenced Mountpoint Pod", mp.Annotations)
	}
	if reqs := h.rec.unmountRequests(node); len(reqs) != 1 || reqs[0].Node != node || reqs[0].Reason != ReasonOrphanMountpointPod {
		t.Errorf("needs-unmount events = %v, want one on node %s (from the node affinity)", reqs, node)
	}

	h.setPhase(mp, corev1.PodSucceeded)
	h.sweep()
	if h.get(mp) {
		t.Fatal("a finished unreferenced Mountpoint Pod still exists, want it deleted")
	}
	if c := h.rec.cleaned(node); len(c) != 1 || c[0].Reason != ReasonMountpointPodFinished || c[0].MountpointPodName != mp.Name {
		t.Errorf("cleaned events = %v, want %s for %s", c, ReasonMountpointPodFinished, mp.Name)
	}
	if !h.get(foreign) {
		t.Error("a pod without the driver label was deleted; only the driver's Mountpoint Pods are the janitor's")
	}
}

func TestUnreferencedMountpointPodThatNeverFinishesIsDeletedAfterTheGrace(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	node := uniqueName("node")
	mp := mountpointPod(uniqueName("mp"), node)
	h.create(nodeObject(node), mp)
	h.waitCached(mp)
	h.clock.Advance(2 * time.Minute)

	h.sweep()
	h.clock.Advance(5 * time.Minute)
	h.sweep()
	if !h.get(mp) {
		t.Fatal("Mountpoint Pod deleted inside the unmount grace")
	}
	h.clock.Advance(6 * time.Minute)
	h.sweep()
	if h.get(mp) {
		t.Fatal("Mountpoint Pod still exists after the unmount grace")
	}
	if c := h.rec.cleaned(node); len(c) != 1 || c[0].Reason != ReasonUnmountGraceExpired {
		t.Errorf("cleaned events = %v, want %s", c, ReasonUnmountGraceExpired)
	}
}

func TestReferencedMountpointPodIsLeftAlone(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	node := uniqueName("node")
	live := workloadPod("default", uniqueName("live"), node)
	mp := mountpointPod(uniqueName("mp"), node)
	h.create(nodeObject(node), live, mp)
	s3pa := attachment(uniqueName("s3pa"), node, withWorkload(mp.Name, string(live.UID), longAgo))
	h.create(s3pa)
	h.waitCached(s3pa, mp, live)
	h.clock.Advance(time.Hour)

	h.sweep()

	h.get(mp)
	if _, ok := mp.Annotations[mppod.AnnotationNeedsUnmount]; ok {
		t.Error("a Mountpoint Pod serving a live workload was asked to unmount")
	}
	if !h.get(s3pa) || len(entries(s3pa)[mp.Name]) != 1 {
		t.Errorf("attachment = %v, want the live workload kept", entries(s3pa))
	}
	if h.rec.count(node) != 0 {
		t.Errorf("published %d events, want none", h.rec.count(node))
	}
}

func TestGoneNodeLosesItsAttachmentsAndMountpointPodsAfterTheQuarantine(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	node, other := uniqueName("node"), uniqueName("node")
	nodeObj := nodeObject(node)
	h.create(nodeObj, nodeObject(other))
	mp, stray := mountpointPod(uniqueName("mp"), node), mountpointPod(uniqueName("stray"), node)
	mpOther, liveOther := mountpointPod(uniqueName("mp"), other), workloadPod("default", uniqueName("live"), other)
	h.create(mp, stray, mpOther, liveOther)
	s3pa := attachment(uniqueName("s3pa"), node, withWorkload(mp.Name, "w", time.Now()))
	s3paOther := attachment(uniqueName("s3pa"), other, withWorkload(mpOther.Name, string(liveOther.UID), time.Now()))
	h.create(s3pa, s3paOther)
	h.waitCached(s3pa, s3paOther)

	if err := h.c.Delete(h.ctx, nodeObj); err != nil {
		t.Fatalf("delete node: %v", err)
	}
	h.waitUncached(nodeObj, newNodeMeta())

	h.sweep()
	if !h.get(s3pa) || !h.get(mp) {
		t.Fatal("removed at the first sight of a missing Node, want a quarantine first")
	}

	h.clock.Advance(2 * time.Minute)
	h.sweep()
	if h.get(s3pa) || h.get(mp) || h.get(stray) {
		t.Fatal("attachment or Mountpoint Pods of the gone node still exist")
	}
	if !h.get(s3paOther) || !h.get(mpOther) {
		t.Fatal("another node's attachment or Mountpoint Pod was removed")
	}
	reasons := map[string]int{}
	for _, c := range h.rec.cleaned(node) {
		reasons[c.Reason]++
	}
	if n := h.rec.count(other); n != 0 {
		t.Errorf("published %d events about the node that still exists, want none", n)
	}
	if reasons[ReasonNodeGone] != 3 {
		t.Errorf("cleaned reasons = %v, want three %s (attachment and two Mountpoint Pods)", reasons, ReasonNodeGone)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	h := newHarness(t, harnessOptions{cfg: func(c *Config) { c.DryRun = true }})
	node, goneNode := uniqueName("node"), uniqueName("node")
	h.create(nodeObject(node))
	mp, orphan := mountpointPod(uniqueName("mp"), node), mountpointPod(uniqueName("orphan"), node)
	h.create(mp, orphan)
	stale := attachment(uniqueName("s3pa"), node, withWorkload(mp.Name, "gone", longAgo))
	empty := attachment(uniqueName("s3pa"), node)
	ofGoneNode := attachment(uniqueName("s3pa"), goneNode, withWorkload("mp-x", "w", longAgo))
	h.create(stale, empty, ofGoneNode)
	h.waitCached(stale, empty, ofGoneNode, orphan)
	before := map[string]string{}
	for _, o := range []interface {
		GetName() string
		GetResourceVersion() string
	}{stale, empty, ofGoneNode, mp, orphan} {
		before[o.GetName()] = o.GetResourceVersion()
	}

	for range 3 {
		h.clock.Advance(time.Hour)
		h.sweep()
	}

	for _, o := range []*s3csiv2.MountpointS3PodAttachment{stale, empty, ofGoneNode} {
		if !h.get(o) || o.ResourceVersion != before[o.Name] {
			t.Errorf("attachment %s changed or deleted in dry run", o.Name)
		}
	}
	for _, p := range []*corev1.Pod{mp, orphan} {
		if !h.get(p) || p.ResourceVersion != before[p.Name] {
			t.Errorf("Mountpoint Pod %s changed or deleted in dry run", p.Name)
		}
	}
	if n := h.rec.count(node) + h.rec.count(goneNode); n != 0 {
		t.Errorf("dry run published %d events, want none", n)
	}
}
