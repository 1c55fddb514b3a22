package reconciler

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/mppod/mppodcheck"
)

func TestWatchdog(t *testing.T) {
	now := time.Unix(1000, 0)
	w := newWatchdog()
	w.now = func() time.Time { return now }
	w.progress()
	q := w.newQueue("test", workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	check := w.Check(time.Minute)

	now = now.Add(time.Hour)
	if err := check(context.Background()); err != nil {
		t.Errorf("an idle reconciler fails liveness: %v", err)
	}
	q.Add(reconcile.Request{})
	now = now.Add(30 * time.Second)
	if err := check(context.Background()); err != nil {
		t.Errorf("pending work younger than the stall timeout fails liveness: %v", err)
	}
	now = now.Add(time.Minute)
	if err := check(context.Background()); err == nil || !strings.Contains(err.Error(), "pending") {
		t.Errorf("pending work without progress passes liveness: %v", err)
	}
	w.progress()
	if err := check(context.Background()); err != nil {
		t.Errorf("after progress liveness fails: %v", err)
	}
}

func TestRecentWritesOverlay(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRecentWrites[*s3csiv2.MountpointS3PodAttachment](time.Minute)
	r.now = func() time.Time { return now }
	all := func(*s3csiv2.MountpointS3PodAttachment) bool { return true }
	cachedOld := fixture.S3PA("a", "n", "pv")
	cachedOld.ResourceVersion = "1"
	gone := fixture.S3PA("gone", "n", "pv")

	written := cachedOld.DeepCopy()
	written.ResourceVersion = "2"
	r.put(written)
	r.put(fixture.S3PA("new", "n", "pv"))
	r.tombstone("", "gone")

	got := r.overlay([]*s3csiv2.MountpointS3PodAttachment{cachedOld, gone}, all)
	names := map[string]string{}
	for _, a := range got {
		names[a.Name] = a.ResourceVersion
	}
	if len(names) != 2 || names["a"] != "2" || names["new"] != "" {
		t.Errorf("overlay = %v, want a at resourceVersion 2 and new, without gone", names)
	}
	now = now.Add(2 * time.Minute)
	got = r.overlay([]*s3csiv2.MountpointS3PodAttachment{cachedOld, gone}, all)
	if len(got) != 2 || got[0].ResourceVersion != "1" {
		t.Errorf("after the TTL the cache must win, got %d objects", len(got))
	}
}

func TestStripPodKeepsOnlyWhatTheControllersRead(t *testing.T) {
	pod := fixture.Pod("app", fixture.WithClaim("data", "claim"), fixture.WithEmptyDir("tmp"), fixture.WithFSGroup(7),
		fixture.WithLabels(map[string]string{"app": "x"}), fixture.OnNode("n"))
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	out, err := stripPod("mount-s3")(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if len(got.Spec.Containers) != 0 || len(got.ManagedFields) != 0 || len(got.Labels) != 0 {
		t.Errorf("containers, managed fields or labels of a workload kept: %+v", got)
	}
	if len(got.Spec.Volumes) != 1 || got.Spec.Volumes[0].PersistentVolumeClaim == nil || got.Spec.NodeName != "n" ||
		*got.Spec.SecurityContext.FSGroup != 7 {
		t.Errorf("claim volume, node or fsGroup lost: %+v", got.Spec)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != corev1.PodScheduled {
		t.Errorf("conditions %v, want only PodScheduled", got.Status.Conditions)
	}
	pod.Namespace = "mount-s3"
	pod.Spec.Containers = []corev1.Container{{Name: "mountpoint", Image: "registry.example/s3csi/mounter:1", Args: []string{"--x"}}}
	out, _ = stripPod("mount-s3")(pod)
	mp := out.(*corev1.Pod)
	if mp.Labels["app"] != "x" {
		t.Error("labels of a pod in the Mountpoint namespace dropped")
	}
	if want := []corev1.Container{{Name: "mountpoint", Image: "registry.example/s3csi/mounter:1"}}; !reflect.DeepEqual(mp.Spec.Containers, want) {
		t.Errorf("containers of a Mountpoint Pod %+v, want only their names and images %+v", mp.Spec.Containers, want)
	}
}

func TestMountpointPodResourcesFromVolumeAttributes(t *testing.T) {
	cfg := Config{MountpointNamespace: "mount-s3", DriverVersion: "v1", Mountpoint: MountpointPodConfig{Image: "img",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resourceMust("100m")}}}}
	pv := fixture.PV("pv", fixture.WithVolumeAttribute("mountpointContainerResourcesLimitsMemory", "1Gi"),
		fixture.WithVolumeAttribute("mountpointPodServiceAccountName", "mp-sa"))
	mp, err := buildMountpointPod(cfg, "mp-x", "n", pv)
	if err != nil {
		t.Fatal(err)
	}
	r := mp.Spec.Containers[0].Resources
	if r.Requests.Cpu().String() != "100m" || r.Limits.Memory().String() != "1Gi" || mp.Spec.ServiceAccountName != "mp-sa" {
		t.Errorf("resources %v, service account %q", r, mp.Spec.ServiceAccountName)
	}
	pv = fixture.PV("pv", fixture.WithVolumeAttribute("mountpointContainerResourcesLimitsMemory", "lots"))
	if _, err := buildMountpointPod(cfg, "mp-x", "n", pv); err == nil {
		t.Error("an invalid resource attribute was accepted")
	}
}

func resourceMust(s string) resource.Quantity { return resource.MustParse(s) }

func TestMountpointPodTerminationGracePeriod(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  time.Duration
		want int64
	}{
		{name: "unset is the default", want: 600},
		{name: "a configured period is used", set: 90 * time.Second, want: 90},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{MountpointNamespace: "mount-s3", DriverVersion: "v1",
				Mountpoint: MountpointPodConfig{Image: "img", TerminationGracePeriod: tt.set}}
			mp, err := buildMountpointPod(cfg, "mp-x", "n", fixture.PV("pv"))
			if err != nil {
				t.Fatal(err)
			}
			if g := mp.Spec.TerminationGracePeriodSeconds; g == nil || *g != tt.want {
				t.Errorf("terminationGracePeriodSeconds = %v, want %d", g, tt.want)
			}
		})
	}
}

// The node-agent hands a Mountpoint Pod nothing unless mppodcheck.Verify accepts it: every pod
// the pod-reconciler builds, whatever the volume asks for, must pass, once scheduled on its node.
func TestEveryBuiltMountpointPodPassesTheNodeAgentsCheck(t *testing.T) {
	cfg := Config{MountpointNamespace: "mount-s3", DriverVersion: "v1", Mountpoint: MountpointPodConfig{
		Image: "registry.example:5000/s3csi/mounter:1.2.3", PriorityClassName: "high", ServiceAccountName: "mp",
		ImagePullSecrets: []string{"regcred"},
		Resources:        corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resourceMust("100m")}}}}
	for _, pv := range []*corev1.PersistentVolume{
		fixture.PV("plain"),
		fixture.PV("with-resources", fixture.WithVolumeAttribute("mountpointContainerResourcesLimitsMemory", "1Gi"),
			fixture.WithVolumeAttribute("mountpointContainerResourcesRequestsCPU", "2")),
		fixture.PV("with-a-service-account", fixture.WithVolumeAttribute("mountpointPodServiceAccountName", "mp-sa")),
		fixture.PV(strings.Repeat("a-very-long-persistent-volume-name-", 4)),
	} {
		t.Run(pv.Name, func(t *testing.T) {
			name := mppod.Name("0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11", pv.Name)
			pod, err := buildMountpointPod(cfg, name, "node-a", pv)
			if err != nil {
				t.Fatal(err)
			}
			if got := nodeOf(pod); got != "node-a" {
				t.Fatalf("the pod is bound to %q, want node-a", got)
			}
			if got := pod.Spec.ImagePullSecrets; len(got) != 1 || got[0].Name != "regcred" {
				t.Errorf("image pull secrets %v, want [regcred]", got)
			}
			pod.Spec.NodeName = nodeOf(pod) // the scheduler's binding
			if err := mppodcheck.Verify(pod, mppodcheck.Expected{Namespace: "mount-s3", NodeName: "node-a", Image: cfg.Mountpoint.Image}); err != nil {
				t.Fatalf("the node-agent would refuse the pod the pod-reconciler builds: %v", err)
			}
		})
	}
}
