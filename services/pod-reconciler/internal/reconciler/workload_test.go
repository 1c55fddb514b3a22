package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/sharingkey"
)

// assignedTo waits until exactly one S3PA of node records exactly pods and returns it.
func (h *harness) assignedTo(node string, pods ...*corev1.Pod) *s3csiv2.MountpointS3PodAttachment {
	h.t.Helper()
	var got *s3csiv2.MountpointS3PodAttachment
	h.eventually("one attachment records the workloads", func() error {
		as := h.attachments(node)
		if len(as) != 1 {
			return fmt.Errorf("%d attachments on %s, want 1", len(as), node)
		}
		if u, want := uids(&as[0]), uidsOf(pods...); !slices.Equal(u, want) {
			return fmt.Errorf("attachment records %v, want %v", u, want)
		}
		got = &as[0]
		return nil
	})
	return got
}

func TestStaticVolumeIsAttachedWhenClaimAndScheduleMeet(t *testing.T) {
	tests := []struct {
		name             string
		bindAfterSchedul bool
	}{
		{name: "a PV bound before the pod is scheduled is attached at once"},
		{name: "a PV bound after the pod is scheduled is attached when the binding completes", bindAfterSchedul: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.start()
			pvName := h.ns + "-data"
			if !tt.bindAfterSchedul {
				h.volume("data", fixture.WithMountOptions("--allow-delete", "--uid=1000"))
			} else {
				// The claim exists but names no volume yet.
				h.create(fixture.PVC("data", fixture.ClaimInNamespace(h.ns)))
			}
			pod := h.workload("app", h.node, fixture.WithClaim("vol", "data"))
			if tt.bindAfterSchedul {
				h.consistently("no attachment before the claim is bound", time.Second, func() error {
					if as := h.attachments(h.node); len(as) != 0 {
						return fmt.Errorf("%d attachments for an unbound claim", len(as))
					}
					return nil
				})
				h.create(fixture.PV(pvName, fixture.PreBoundTo(h.ns, "data"), fixture.WithMountOptions("--allow-delete", "--uid=1000")))
				claim := &corev1.PersistentVolumeClaim{}
				if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: "data"}, claim); err != nil {
					t.Fatal(err)
				}
				claim.Spec.VolumeName = pvName
				if err := h.c.Update(h.ctx, claim); err != nil {
					t.Fatal(err)
				}
			}
			a := h.assignedTo(h.node, pod)
			wantSpec := s3csiv2.MountpointS3PodAttachmentSpec{
				NodeName: h.node, PersistentVolumeName: pvName, VolumeID: pvName + "-handle",
				MountOptions: "--allow-delete,--uid=1000", AuthenticationSource: "driver",
			}
			if got, want := sharingkey.FromSpec(&a.Spec), sharingkey.FromSpec(&wantSpec); got != want {
				t.Errorf("attachment key = %s, want %s", got, want)
			}
			if a.Labels[s3csiv2.LabelDriverVersion] != testVersion || a.GenerateName != "s3pa-" {
				t.Errorf("attachment labels %v, generateName %q", a.Labels, a.GenerateName)
			}
			mpName := mppod.Name(string(pod.UID), pvName)
			if _, ok := a.Spec.MountpointS3PodAttachments[mpName]; !ok {
				t.Errorf("attachment names Mountpoint Pods %v, want %s", a.Spec.MountpointS3PodAttachments, mpName)
			}
			mp := &corev1.Pod{}
			if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.cfg.MountpointNamespace, Name: mpName}, mp); err != nil {
				t.Fatalf("get Mountpoint Pod: %v", err)
			}
			checkMountpointPod(t, mp, h.node, pvName)

			h.eventually("attachment.assigned is on the bus", func() error {
				evs := h.busEvents(events.TypeAttachmentAssigned, h.node)
				if len(evs) != 1 {
					return fmt.Errorf("%d attachment.assigned events, want 1", len(evs))
				}
				p, ok := evs[0].Payload.(*eventspb.AttachmentAssigned)
				if !ok || p.WorkloadPodUid != string(pod.UID) || p.AttachmentName != a.Name ||
					p.MountpointPodName != mpName || p.PvName != pvName || p.VolumeId != pvName+"-handle" {
					return fmt.Errorf("payload = %v", evs[0].Payload)
				}
				if subject, _ := evs[0].Subject(); subject != "s3csi.events.attachment.assigned."+h.node {
					return fmt.Errorf("subject = %s", subject)
				}
				return nil
			})
			h.eventually("workload.scheduled is on the bus", func() error {
				evs := h.busEvents(events.TypeWorkloadScheduled, h.node)
				if len(evs) != 1 {
					return fmt.Errorf("%d workload.scheduled events, want 1", len(evs))
				}
				if p := evs[0].Payload.(*eventspb.WorkloadScheduled); p.PodUid != string(pod.UID) || len(p.Volumes) != 1 {
					return fmt.Errorf("payload = %v", p)
				}
				return nil
			})
		})
	}
}

// checkMountpointPod checks the shape of a Mountpoint Pod: restricted Pod Security, node
// affinity, every taint tolerated, comm emptyDir, labels.
func checkMountpointPod(t *testing.T, mp *corev1.Pod, node, pvName string) {
	t.Helper()
	if len(mp.Spec.Containers) != 1 {
		t.Fatalf("Mountpoint Pod has %d containers", len(mp.Spec.Containers))
	}
	c := mp.Spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil ||
		sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context %+v is not restricted", sc)
	}
	if psc := mp.Spec.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod security context %+v does not run as a non-root uid", psc)
	}
	if c.Image != "s3csi-mounter:test" || !slices.Equal(c.Args, []string{"--comm-dir=/comm"}) {
		t.Errorf("container image %s args %v", c.Image, c.Args)
	}
	terms := mp.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || terms[0].MatchFields[0].Values[0] != node {
		t.Errorf("node affinity %+v, want node %s", terms, node)
	}
	if len(mp.Spec.Tolerations) != 1 || mp.Spec.Tolerations[0].Operator != corev1.TolerationOpExists || mp.Spec.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v, want every taint tolerated", mp.Spec.Tolerations)
	}
	v := mp.Spec.Volumes[0]
	if v.Name != "comm" || v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit.String() != "10Mi" {
		t.Errorf("comm volume %+v", v)
	}
	if mp.Labels[s3csiv2.LabelDriverVersion] != testVersion || mp.Labels[LabelVolumeName] != pvName ||
		mp.Labels[LabelVolumeID] != pvName+"-handle" {
		t.Errorf("labels %v", mp.Labels)
	}
}

func TestWorkloadsShareOnOneNodeOnly(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.volume("data")
	a1 := h.workload("a1", h.node, fixture.WithClaim("vol", "data"))
	a2 := h.workload("a2", h.node, fixture.WithClaim("vol", "data"))
	other := h.node + "-b"
	b1 := h.workload("b1", other, fixture.WithClaim("vol", "data"))

	a := h.assignedTo(h.node, a1, a2)
	if n := len(a.Spec.MountpointS3PodAttachments); n != 1 {
		t.Errorf("two workloads on one node use %d Mountpoint Pods, want 1", n)
	}
	h.assignedTo(other, b1)
	if n := len(h.mountpointPods()); n != 2 {
		t.Errorf("%d Mountpoint Pods for two nodes, want 2", n)
	}
}

func TestEachSharingKeyFieldSeparates(t *testing.T) {
	tests := []struct {
		name   string
		volume []fixture.PVMod
		first  []fixture.PodMod
		second []fixture.PodMod
		// between runs after the first workload is attached.
		between func(h *harness, pvName string)
	}{
		{name: "another fsGroup gets its own Mountpoint Pod", first: []fixture.PodMod{fixture.WithFSGroup(1000)}, second: []fixture.PodMod{fixture.WithFSGroup(2000)}},
		{name: "read-only and read-write workloads do not share", second: []fixture.PodMod{func(p *corev1.Pod) { p.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = true }}},
		{
			name:   "per-pod credentials of two service accounts do not share",
			volume: []fixture.PVMod{fixture.WithVolumeAttribute("authenticationSource", "pod")},
			first:  []fixture.PodMod{fixture.WithServiceAccount("default")},
			second: []fixture.PodMod{fixture.WithServiceAccount("other")},
		},
		{
			name: "changed mount options give new workloads a new attachment",
			between: func(h *harness, pvName string) {
				pv := &corev1.PersistentVolume{}
				if err := h.c.Get(h.ctx, client.ObjectKey{Name: pvName}, pv); err != nil {
					h.t.Fatal(err)
				}
				pv.Spec.MountOptions = []string{"--read-only"}
				if err := h.c.Update(h.ctx, pv); err != nil {
					h.t.Fatal(err)
				}
				time.Sleep(500 * time.Millisecond) // let the cache see the new mount options
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.start()
			pvName := h.volume("data", tt.volume...)
			p1 := h.workload("one", h.node, append([]fixture.PodMod{fixture.WithClaim("vol", "data")}, tt.first...)...)
			h.assignedTo(h.node, p1)
			if tt.between != nil {
				tt.between(h, pvName)
			}
			h.workload("two", h.node, append([]fixture.PodMod{fixture.WithClaim("vol", "data")}, tt.second...)...)
			h.eventually("two attachments, one per key", func() error {
				as := h.attachments(h.node)
				if len(as) != 2 {
					return fmt.Errorf("%d attachments, want 2", len(as))
				}
				for _, a := range as {
					if len(uids(&a)) != 1 {
						return fmt.Errorf("attachment %s (%s) records %v, want one workload", a.Name, sharingkey.FromSpec(&a.Spec), uids(&a))
					}
				}
				return nil
			})
			if mps := h.mountpointPods(); len(mps) != 2 {
				for _, a := range h.attachments(h.node) {
					t.Logf("attachment %s: %s %v", a.Name, sharingkey.FromSpec(&a.Spec), a.Spec.MountpointS3PodAttachments)
				}
				for _, mp := range mps {
					t.Logf("Mountpoint Pod %s", mp.Name)
				}
				t.Errorf("%d Mountpoint Pods, want 2", len(mps))
			}
		})
	}
}

func TestVolumesOfOtherKindsAreIgnored(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.volume("s3")
	otherPV := h.ns + "-ebs"
	h.create(fixture.PV(otherPV, fixture.WithDriver("ebs.csi.aws.com"), fixture.PreBoundTo(h.ns, "ebs")))
	h.create(fixture.PVC("ebs", fixture.ClaimInNamespace(h.ns), fixture.WithVolumeName(otherPV)))
	hostPV := h.ns + "-host"
	h.create(fixture.PV(hostPV, fixture.WithHostPathSource("/tmp"), fixture.PreBoundTo(h.ns, "host")))
	h.create(fixture.PVC("host", fixture.ClaimInNamespace(h.ns), fixture.WithVolumeName(hostPV)))

	h.workload("other-driver", h.node, fixture.WithClaim("vol", "ebs"))
	h.workload("host-pv", h.node, fixture.WithClaim("vol", "host"))
	h.workload("inline", h.node, fixture.WithEmptyDir("scratch"), fixture.WithHostPath("host", "/tmp"))
	h.workload("unscheduled", "", fixture.WithClaim("vol", "s3"))
	h.consistently("no attachment and no Mountpoint Pod", 2*time.Second, func() error {
		if as := h.attachments(h.node); len(as) != 0 {
			return fmt.Errorf("%d attachments", len(as))
		}
		if mps := h.mountpointPods(); len(mps) != 0 {
			return fmt.Errorf("%d Mountpoint Pods", len(mps))
		}
		return nil
	})
}

// A Mountpoint Pod's controller is the Node it is bound to (as for kubelet's mirror pods), so
// that `kubectl drain` evicts it instead of refusing a pod that declares no controller; a node
// that does not exist leaves the pod without an owner, never with a made-up one the garbage
// collector would act on.
func TestAMountpointPodIsControlledByItsNode(t *testing.T) {
	h := newHarness(t)
	h.start()
	node := fixture.Node(h.node)
	h.create(node)
	t.Cleanup(func() { _ = h.c.Delete(context.Background(), node) })
	h.volume("data")
	on := h.workload("on-node", h.node, fixture.WithClaim("vol", "data"))
	gone := h.workload("gone-node", h.node+"-gone", fixture.WithClaim("vol", "data"))
	h.assignedTo(h.node, on)
	h.assignedTo(h.node+"-gone", gone)
	for _, mp := range h.mountpointPods() {
		owner := metav1.GetControllerOf(&mp)
		switch nodeOf(&mp) {
		case h.node:
			if owner == nil || owner.Kind != "Node" || owner.APIVersion != "v1" || owner.Name != h.node || owner.UID != node.UID ||
				(owner.BlockOwnerDeletion != nil && *owner.BlockOwnerDeletion) {
				t.Errorf("controller of %s = %+v, want Node %s with UID %s, not blocking its deletion", mp.Name, owner, h.node, node.UID)
			}
		case h.node + "-gone":
			if len(mp.OwnerReferences) != 0 {
				t.Errorf("the Mountpoint Pod of a node that does not exist has owners %+v", mp.OwnerReferences)
			}
		default:
			t.Errorf("Mountpoint Pod %s bound to %q", mp.Name, nodeOf(&mp))
		}
	}
}

// Two volumes of one pod with one volumeHandle never both mount (kubelet names a CSI volume by its
// handle): the workload is told at once, with the fix, instead of waiting in ContainerCreating.
func TestVolumesWithOneHandleInOnePodAreExplained(t *testing.T) {
	h := newHarness(t)
	h.start()
	pvA := h.volume("a", fixture.WithVolumeHandle(h.ns+"-shared"))
	pvB := h.volume("b", fixture.WithVolumeHandle(h.ns+"-shared"))
	h.volume("c")
	both := h.workload("both", h.node, fixture.WithClaim("va", "a"), fixture.WithClaim("vb", "b"))
	twice := h.workload("twice", h.node, fixture.WithClaim("v1", "a"), fixture.WithClaim("v2", "a"))
	distinct := h.workload("distinct", h.node, fixture.WithClaim("va", "a"), fixture.WithClaim("vc", "c"))
	invalid := func(pod *corev1.Pod) ([]string, error) {
		list := &corev1.EventList{}
		if err := h.c.List(h.ctx, list, client.InNamespace(h.ns)); err != nil {
			return nil, err
		}
		var msgs []string
		for _, e := range list.Items {
			if e.InvolvedObject.UID == pod.UID && e.Type == corev1.EventTypeWarning && e.Reason == "InvalidVolume" {
				msgs = append(msgs, e.Message)
			}
		}
		return msgs, nil
	}
	says := func(pod *corev1.Pod, wants ...string) func() error {
		return func() error {
			msgs, err := invalid(pod)
			if err != nil {
				return err
			}
			if len(msgs) == 0 {
				return fmt.Errorf("no InvalidVolume event on %s", pod.Name)
			}
			for _, want := range wants {
				if !strings.Contains(msgs[0], want) {
					return fmt.Errorf("event %q does not say %q", msgs[0], want)
				}
			}
			return nil
		}
	}
	h.eventually("the pod with two handles alike is told why and what to do", says(both,
		`volumes "va" and "vb"`, pvA, pvB, `same volumeHandle "`+h.ns+`-shared"`, "ContainerCreating",
		"give each PersistentVolume its own volumeHandle"))
	h.eventually("the pod with one claim twice is told why and what to do", says(twice,
		`volumes "v1" and "v2" both use claim "a"`, pvA, "use one volume with several volumeMounts"))
	// Both volumes still get their attachment: kubelet mounts one of the two, either.
	attached := func(pod *corev1.Pod) func() error {
		return func() error {
			n := 0
			for _, a := range h.attachments(h.node) {
				if slices.Contains(uids(&a), string(pod.UID)) {
					n++
				}
			}
			if n != 2 {
				return fmt.Errorf("%d attachments record pod %s, want 2", n, pod.Name)
			}
			return nil
		}
	}
	h.eventually("both volumes of the pod are attached", attached(both))
	h.eventually("the pod with distinct handles is attached", attached(distinct))
	msgs, err := invalid(distinct)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 0 {
		t.Errorf("a pod whose volumes have distinct handles was told: %q", msgs)
	}
}

// A Mountpoint Pod of another image repository (the chart's image.registry or repository
// changed, as when an operator moves to a registry mirror) gets no new workload: the node-agent
// refuses to hand a mount to a Mountpoint Pod of a repository other than the one it is told
// (mppodcheck). The new workload gets a Mountpoint Pod of the new repository; the old one keeps
// serving its own, as a Mountpoint Pod of an older driver version does.
func TestAMountpointPodOfAnotherRepositoryGetsNoNewWorkload(t *testing.T) {
	h := newHarness(t)
	h.cfg.Mountpoint.Image = "registry-a.example/s3csi/mounter:1.0.0"
	h.start()
	h.volume("data")
	first := h.workload("first", h.node, fixture.WithClaim("vol", "data"))
	h.assignedTo(h.node, first)

	h.stopManager()
	h.cfg.Mountpoint.Image = "mirror.example/s3csi/mounter:1.0.0"
	h.start()
	second := h.workload("second", h.node, fixture.WithClaim("vol", "data"))
	h.eventually("the second workload gets a Mountpoint Pod of the new repository", func() error {
		a := h.assignedTo(h.node, first, second)
		for mp, ws := range a.Spec.MountpointS3PodAttachments {
			var pod corev1.Pod
			if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.cfg.MountpointNamespace, Name: mp}, &pod); err != nil {
				return err
			}
			image := pod.Spec.Containers[0].Image
			for _, w := range ws {
				if w.WorkloadPodUID == string(second.UID) && image != h.cfg.Mountpoint.Image {
					return fmt.Errorf("the second workload is on %s, which runs %s", mp, image)
				}
			}
		}
		if n := len(a.Spec.MountpointS3PodAttachments); n != 2 {
			return fmt.Errorf("%d Mountpoint Pods, want 2", n)
		}
		return nil
	})
}
