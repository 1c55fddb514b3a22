package csi_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
	"github.com/s3csi/s3csi/shared/testenv/testfs"

	"github.com/s3csi/s3csi/services/node-agent/internal/health"
	"github.com/s3csi/s3csi/services/node-agent/internal/metrics"
)

func TestAKilledMounterIsReportedOnItsWorkloads(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	workload := createWorkload(ctx, t, n)
	pv, uid := "pv-health", string(workload.UID)
	mpName := mppod.Name(uid, pv)
	mp := n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	target := n.target(workload.UID, pv)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", workload.UID)); err != nil {
		t.Fatal(err)
	}
	monitor := health.New(n.kubelet.Root, n.name, mppod.DefaultNamespace, time.Hour, apiServer.Client, nil, nil)
	monitor.Check(ctx)
	if got := warnings(ctx, t, workload); len(got) != 0 {
		t.Fatalf("a live mount was reported: %v", got)
	}
	mp.kill(t)
	monitor.Check(ctx)
	monitor.Check(ctx) // reported once per incident
	got := warnings(ctx, t, workload)
	if len(got) != 1 || !strings.Contains(got[0].Message, mpName) {
		t.Fatalf("warnings on the workload = %v, want one naming %s", got, mpName)
	}
}

// The node-agent can see a dead connection before kubelet records how the mounter ended: the
// report waits a moment for that record, so the workload's event names an OOM kill.
func TestAnOOMKillKubeletRecordsLaterIsNamedInTheReport(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	workload := createWorkload(ctx, t, n)
	pv, uid := "pv-oom", string(workload.UID)
	mpName := mppod.Name(uid, pv)
	mp := n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", n.target(workload.UID, pv), "bucket-b", workload.UID)); err != nil {
		t.Fatal(err)
	}
	mp.kill(t)
	recorded := make(chan error, 1)
	go func() {
		time.Sleep(time.Second) // kubelet's relist, after the connection died
		pod := mp.pod.DeepCopy()
		if err := apiServer.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			recorded <- err
			return
		}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "mountpoint", RestartCount: 1,
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
		recorded <- apiServer.Client.Status().Update(ctx, pod)
	}()
	health.New(n.kubelet.Root, n.name, mppod.DefaultNamespace, time.Hour, apiServer.Client, nil, nil).Check(ctx)
	if err := <-recorded; err != nil {
		t.Fatal(err)
	}
	got := warnings(ctx, t, workload)
	if len(got) != 1 || !strings.Contains(got[0].Message, "OOM-killed") {
		t.Fatalf("warnings on the workload = %v, want one naming the OOM kill", got)
	}
}

// createWorkload creates a workload pod on n's node in the API server, for the reports to name.
func createWorkload(ctx context.Context, t *testing.T, n *node) *corev1.Pod {
	t.Helper()
	workload := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := apiServer.Client.Create(ctx, workload); err != nil {
		t.Fatal(err)
	}
	return workload
}

func warnings(ctx context.Context, t *testing.T, pod *corev1.Pod) []corev1.Event {
	t.Helper()
	return eventsOf(ctx, t, pod, health.Reason)
}

// eventsOf returns the Events with reason on pod.
func eventsOf(ctx context.Context, t *testing.T, pod *corev1.Pod, reason string) []corev1.Event {
	t.Helper()
	var list corev1.EventList
	if err := apiServer.Client.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.UID == pod.UID && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// kubelet republishes a workload whose Mountpoint Pod died before the health monitor looked:
// the publish mounts the source again, and the workload, whose container still holds the dead
// mount, is told all the same, once.
func TestADeadSourceMountedAgainByAPublishIsReported(t *testing.T) {
	var monitor *health.Monitor
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond, deadSource: func(ctx context.Context, mp, except string) {
		monitor.Report(ctx, mp, except)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	workload := createWorkload(ctx, t, n)
	monitor = health.New(n.kubelet.Root, n.name, mppod.DefaultNamespace, time.Hour, apiServer.Client, nil, nil)
	pv, uid := "pv-healed", string(workload.UID)
	mpName := mppod.Name(uid, pv)
	mp := n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	target := n.target(workload.UID, pv)
	req := publishRequest("vol", target, "bucket-b", workload.UID)
	if _, err := n.client.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	mp.kill(t)
	if err := mp.start(t, false); err != nil { // kubelet restarts the container
		t.Fatal(err)
	}
	if _, err := n.client.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("republish over a dead source: %v", err)
	}
	if got := readFile(t, filepath.Join(target, testfs.HelloName)); got != testfs.HelloContent {
		t.Fatalf("the target serves %q after the republish", got)
	}
	monitor.Check(ctx) // finds the source live: nothing more to report
	got := warnings(ctx, t, workload)
	if len(got) != 1 || !strings.Contains(got[0].Message, mpName) {
		t.Fatalf("warnings on the workload = %v, want one naming %s", got, mpName)
	}
}

// A server that stops answering (SIGSTOP stands for a deadlock or a node under pressure) is
// reported on its workloads once it stayed silent for a whole check period, and the source_up
// metric follows the source through silent, answering again, dead, and gone.
func TestAStoppedServerIsReportedWhenItStaysSilentAndTheMetricFollows(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	workload := createWorkload(ctx, t, n)
	pv, uid := "pv-silent", string(workload.UID)
	mpName := mppod.Name(uid, pv)
	mp := n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	target := n.target(workload.UID, pv)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", workload.UID)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	monitor := health.New(n.kubelet.Root, n.name, mppod.DefaultNamespace, time.Hour, apiServer.Client, nil, metrics.New(reg))
	sourceUp := func() string {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "s3csi_node_source_up" {
				continue
			}
			for _, m := range f.GetMetric() {
				if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == mpName {
					return strconv.FormatFloat(m.GetGauge().GetValue(), 'f', -1, 64)
				}
			}
		}
		return "absent"
	}
	monitor.Check(ctx)
	if got := sourceUp(); got != "1" {
		t.Fatalf("source_up of a live source = %s, want 1", got)
	}

	mp.stop(t)
	monitor.Check(ctx)
	if got := eventsOf(ctx, t, workload, health.ReasonNotResponding); len(got) != 0 {
		t.Fatalf("reported after one silent check: %v", got)
	}
	if got := sourceUp(); got != "0" {
		t.Fatalf("source_up of a silent source = %s, want 0", got)
	}
	monitor.Check(ctx)
	monitor.Check(ctx) // once per incident
	got := eventsOf(ctx, t, workload, health.ReasonNotResponding)
	if len(got) != 1 || !strings.Contains(got[0].Message, mpName) || !strings.Contains(got[0].Message, "does not answer") {
		t.Fatalf("warnings on the workload = %v, want one saying %s does not answer", got, mpName)
	}

	if err := mp.proc.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "source_up back to 1", func() bool { monitor.Check(ctx); return sourceUp() == "1" })

	mp.kill(t)
	monitor.Check(ctx)
	if got := sourceUp(); got != "0" {
		t.Fatalf("source_up of a dead source = %s, want 0", got)
	}
	if got := warnings(ctx, t, workload); len(got) != 1 {
		t.Fatalf("connection-lost warnings = %v, want one", got)
	}
	if err := unpublish(ctx, n, target); err != nil {
		t.Fatal(err)
	}
	if err := mount.Unmount(n.kubelet.SourceDir(mpName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(n.kubelet.SourceDir(mpName)); err != nil {
		t.Fatal(err)
	}
	monitor.Check(ctx)
	if got := sourceUp(); got != "absent" {
		t.Fatalf("source_up of a removed source = %s, want no series", got)
	}
}
