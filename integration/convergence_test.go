package integration

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

// buildService builds a service binary from its own module, as its image would be built.
func buildService(t *testing.T, root, service, binary string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), binary)
	if err := testenv.GoBuild(t.Context(), filepath.Join(root, "services", service), "./cmd/"+binary, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// history counts what a watch saw happen to objects, by name.
type history struct {
	mu      sync.Mutex
	added   map[string]int
	deleted map[string]int
}

func record(ctx context.Context, t *testing.T, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) *history {
	t.Helper()
	w, err := c.Watch(ctx, list, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h := &history{added: map[string]int{}, deleted: map[string]int{}}
	go func() {
		for ev := range w.ResultChan() {
			obj, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			h.mu.Lock()
			switch ev.Type {
			case watch.Added:
				h.added[obj.GetName()]++
			case watch.Deleted:
				h.deleted[obj.GetName()]++
			}
			h.mu.Unlock()
		}
	}()
	t.Cleanup(w.Stop)
	return h
}

func (h *history) counts() (added, deleted map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	added, deleted = map[string]int{}, map[string]int{}
	for k, v := range h.added {
		added[k] = v
	}
	for k, v := range h.deleted {
		deleted[k] = v
	}
	return added, deleted
}

// TestReconcilerAndJanitorConverge runs the real pod-reconciler and janitor binaries together
// against one API server and NATS, with the janitor sweeping every second: live workloads keep
// their attachment and Mountpoint Pod (nothing is created twice, nothing in use is removed), and
// once the workloads end both services converge on an empty cluster.
func TestReconcilerAndJanitorConverge(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	reconcilerBin := buildService(t, root, "pod-reconciler", "s3csi-pod-reconciler")
	janitorBin := buildService(t, root, "janitor", "s3csi-janitor")
	api := testenv.StartAPIServer(t)
	bus := testenv.StartNATS(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c, err := client.NewWithWatch(api.Config, client.Options{Scheme: api.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	create := func(obj client.Object) {
		t.Helper()
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mppod.DefaultNamespace}})
	create(fixture.Node("node-a"))
	create(fixture.PV("pv-shared", fixture.PreBoundTo(fixture.DefaultNamespace, "data")))
	create(fixture.PVC("data", fixture.WithVolumeName("pv-shared")))

	mountpoints := record(ctx, t, c, &corev1.PodList{}, client.InNamespace(mppod.DefaultNamespace))
	attachments := record(ctx, t, c, &s3csiv2.MountpointS3PodAttachmentList{})

	common := []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--nats-url=" + bus.URL(), "--admin-address=127.0.0.1:0"}
	reconciler := testenv.StartProcess(t, reconcilerBin, append(common, "--mountpoint-image=s3csi-mounter:test", "--resync-period=10s")...)
	janitor := testenv.StartProcess(t, janitorBin, append(common, "--sweep-interval=1s", "--stale-after=10s", "--unmount-grace=5s")...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pod-reconciler output:\n%s\njanitor output:\n%s", reconciler.Output(), janitor.Output())
		}
	})
	testenv.WaitHealthy(t, "http://"+reconciler.AdminAddress(t)+"/healthz")
	testenv.WaitHealthy(t, "http://"+janitor.AdminAddress(t)+"/healthz")

	bound := time.Now()
	var workloads []*corev1.Pod
	for _, name := range []string{"app-1", "app-2", "app-3"} {
		pod := fixture.Pod(name, fixture.WithClaim("data", "data"))
		create(pod)
		if err := c.SubResource("binding").Create(ctx, pod, fixture.Binding(pod, "node-a")); err != nil {
			t.Fatalf("bind %s: %v", name, err)
		}
		workloads = append(workloads, pod)
	}

	attached := func() (*s3csiv2.MountpointS3PodAttachment, int) {
		list := &s3csiv2.MountpointS3PodAttachmentList{}
		if err := c.List(ctx, list); err != nil || len(list.Items) != 1 {
			return nil, 0
		}
		n := 0
		for _, ws := range list.Items[0].Spec.MountpointS3PodAttachments {
			n += len(ws)
		}
		return &list.Items[0], n
	}
	eventually(ctx, t, "the three workloads share one attachment", func() bool { _, n := attached(); return n == 3 })
	t.Logf("three workloads bound at %s were attached within %s", bound.Format(time.RFC3339Nano), time.Since(bound))

	// Several janitor sweeps, well past --stale-after, with every workload alive.
	time.Sleep(14 * time.Second)
	s3pa, n := attached()
	if n != 3 {
		t.Fatalf("after the janitor's sweeps the attachment holds %d workloads, want the 3 live ones", n)
	}
	mpName := ""
	for name := range s3pa.Spec.MountpointS3PodAttachments {
		mpName = name
	}
	mp := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: mppod.DefaultNamespace, Name: mpName}, mp); err != nil {
		t.Fatalf("Mountpoint Pod %s: %v", mpName, err)
	}
	t.Logf("Mountpoint Pod created %s, attachment created %s", mp.CreationTimestamp.Format(time.RFC3339), s3pa.CreationTimestamp.Format(time.RFC3339))
	if _, ok := mp.Annotations[mppod.AnnotationNeedsUnmount]; ok {
		t.Fatal("a Mountpoint Pod serving live workloads was asked to unmount")
	}

	for _, pod := range workloads {
		if err := c.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
			t.Fatalf("delete %s: %v", pod.Name, err)
		}
	}
	eventually(ctx, t, "the attachment is deleted and the Mountpoint Pod asked to unmount", func() bool {
		list := &s3csiv2.MountpointS3PodAttachmentList{}
		if err := c.List(ctx, list); err != nil || len(list.Items) != 0 {
			return false
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(mp), mp); err != nil {
			return false
		}
		_, ok := mp.Annotations[mppod.AnnotationNeedsUnmount]
		return ok
	})
	// The mounter exits 0 once unmounted; without a kubelet the test writes the phase.
	mp.Status.Phase = corev1.PodSucceeded
	if err := c.Status().Update(ctx, mp); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "the finished Mountpoint Pod is deleted", func() bool {
		list := &corev1.PodList{}
		return c.List(ctx, list, client.InNamespace(mppod.DefaultNamespace)) == nil && len(list.Items) == 0
	})

	// A List can show an object gone before the watch has delivered its DELETED event.
	eventually(ctx, t, "the watches saw the deletions", func() bool {
		_, mpDeleted := mountpoints.counts()
		_, paDeleted := attachments.counts()
		return mpDeleted[mpName] > 0 && paDeleted[s3pa.Name] > 0
	})
	mpAdded, mpDeleted := mountpoints.counts()
	paAdded, paDeleted := attachments.counts()
	if len(mpAdded) != 1 || mpAdded[mpName] != 1 || mpDeleted[mpName] != 1 {
		t.Errorf("Mountpoint Pods added %v, deleted %v: want %s created once and deleted once", mpAdded, mpDeleted, mpName)
	}
	if len(paAdded) != 1 || paAdded[s3pa.Name] != 1 || paDeleted[s3pa.Name] != 1 {
		t.Errorf("attachments added %v, deleted %v: want %s created once and deleted once", paAdded, paDeleted, s3pa.Name)
	}
	reconciler.StopsCleanlyOnSIGTERM(t, 10*time.Second)
	janitor.StopsCleanlyOnSIGTERM(t, 10*time.Second)
}

func eventually(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
