package command

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/cli/internal/status"
)

// mountpointPod is a Mountpoint Pod as the pod-reconciler labels it, on node.
func mountpointPod(name, node string) *corev1.Pod {
	return fixture.Pod(name, fixture.InNamespace(mppod.DefaultNamespace), fixture.OnNode(node),
		fixture.WithLabels(map[string]string{
			"app.kubernetes.io/managed-by": "s3csi-pod-reconciler",
			"app.kubernetes.io/component":  "mountpoint",
		}))
}

// setStatus writes the pod's status as kubelet would.
func setStatus(ctx context.Context, t *testing.T, c client.Client, p *corev1.Pod, phase corev1.PodPhase, ready bool, mods ...func(*corev1.PodStatus)) {
	t.Helper()
	p.Status.Phase = phase
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}}
	for _, m := range mods {
		m(&p.Status)
	}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatalf("update status of %s: %v", p.Name, err)
	}
}

func create(ctx context.Context, t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

func TestStatusFromTheAPIServer(t *testing.T) {
	isolate(t)
	api := testenv.StartAPIServer(t)
	ctx, c := testContext(t), api.Client
	create(ctx, t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mppod.DefaultNamespace}})

	web := fixture.Pod("web-0", fixture.OnNode("node-1"))
	waiting := fixture.Pod("web-1", fixture.OnNode("node-1"))
	other := fixture.Pod("db-0", fixture.OnNode("node-2"))
	create(ctx, t, c, web, waiting, other)
	setStatus(ctx, t, c, web, corev1.PodRunning, true)
	setStatus(ctx, t, c, waiting, corev1.PodPending, false)

	mpA, mpGone, mpCrash, mpOrphan := mppod.Name(string(web.UID), "pv-a"), mppod.Name("x", "pv-b"),
		mppod.Name(string(other.UID), "pv-c"), mppod.Name("y", "pv-d")
	podA, podCrash, podOrphan := mountpointPod(mpA, "node-1"), mountpointPod(mpCrash, "node-2"), mountpointPod(mpOrphan, "node-2")
	create(ctx, t, c, podA, podCrash, podOrphan)
	setStatus(ctx, t, c, podA, corev1.PodRunning, true)
	setStatus(ctx, t, c, podCrash, corev1.PodRunning, false, func(s *corev1.PodStatus) {
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "mountpoint", RestartCount: 4,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
	})
	goneUID := "0b5e7c2a-9999-4c1d-9a7e-5f3d2c1b0a09"
	create(ctx, t, c,
		fixture.S3PA("s3pa-a", "node-1", "pv-a", fixture.WithWorkloads(mpA, string(web.UID), string(waiting.UID), goneUID)),
		fixture.S3PA("s3pa-b", "node-1", "pv-b", fixture.WithWorkloads(mpGone, string(web.UID))),
		fixture.S3PA("s3pa-c", "node-2", "pv-c", fixture.WithWorkloads(mpCrash, string(other.UID))),
	)
	kubeconfig := api.KubeconfigFile(t)

	r := run(t, "status", "--kubeconfig", kubeconfig)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	t.Logf("kubectl-s3csi status:\n%s", r.stdout)
	rows := map[string]string{} // "mountpoint pod/workload" -> health
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) != 8 {
			t.Fatalf("row %q has %d columns, want 8", line, len(f))
		}
		rows[f[3]+"/"+f[5]] = f[7]
	}
	want := map[string]string{
		mpA + "/default/web-0":    status.HealthOK,
		mpA + "/default/web-1":    status.HealthMounting,
		mpA + "/" + goneUID:       status.HealthWorkloadGone,
		mpGone + "/default/web-0": status.HealthMountpointMissing,
		mpCrash + "/default/db-0": status.HealthMountpointFailing,
		mpOrphan + "/-":           status.HealthOrphan,
	}
	for k, h := range want {
		if rows[k] != h {
			t.Errorf("%s: health %q, want %q", k, rows[k], h)
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%d rows, want %d", len(rows), len(want))
	}

	t.Run("one node, as JSON", func(t *testing.T) {
		r := run(t, "status", "--kubeconfig", kubeconfig, "--node", "node-2", "-o", "json")
		if r.code != ExitOK {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		var got struct{ Nodes []status.Node }
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Nodes) != 1 || got.Nodes[0].Name != "node-2" || len(got.Nodes[0].Mountpoints) != 2 {
			t.Fatalf("nodes %+v", got.Nodes)
		}
		var crash status.Mountpoint
		for _, m := range got.Nodes[0].Mountpoints {
			if m.Pod == mpCrash {
				crash = m
			}
		}
		if crash.Pod != mpCrash || crash.Restarts != 4 || crash.Problem != "CrashLoopBackOff" || crash.PV != "pv-c" ||
			crash.Attachment != "s3pa-c" || len(crash.Workloads) != 1 || crash.Workloads[0].UID != string(other.UID) {
			t.Errorf("Mountpoint Pod %+v", crash)
		}
	})
	t.Run("a Mountpoint Pod asked to unmount", func(t *testing.T) {
		var p corev1.Pod
		if err := c.Get(ctx, types.NamespacedName{Namespace: mppod.DefaultNamespace, Name: mpOrphan}, &p); err != nil {
			t.Fatal(err)
		}
		p.Annotations = map[string]string{mppod.AnnotationNeedsUnmount: "true"}
		if err := c.Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
		r := run(t, "status", "--kubeconfig", kubeconfig, "--node", "node-2") //nolint:contextcheck // run has its own deadline
		if !strings.Contains(r.stdout, status.HealthUnmounting) || !strings.Contains(r.stdout, "needs-unmount") {
			t.Errorf("output:\n%s", r.stdout)
		}
	})
	t.Run("an unreachable API server fails on one line", func(t *testing.T) {
		r := run(t, "status", "--server", "https://127.0.0.1:1", "--insecure-skip-tls-verify", "--request-timeout", "2s")
		oneLineError(t, r, ExitFailure, "list MountpointS3PodAttachments")
	})
}
