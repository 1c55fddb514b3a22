//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// termWrites is how many files the writer writes after its SIGTERM, one every half second.
const termWrites = 20

// `kubectl drain` of the node under a Deployment that keeps writing for 10 s after its SIGTERM
// (S6). The drain evicts the writer and its Mountpoint Pod at once (a pod selector keeps the
// cluster's own pods out of this one-node drain: they have nowhere else to go). The Mountpoint
// Pod serves the writer while it has a file open and hands the mount over to the pod that
// replaces it between two files, so every file the writer closes during its grace period reaches
// the bucket; the drain finishes with nothing stuck; after uncordon the Deployment's new pod
// mounts the volume again.
func TestDrainOfTheNodeLetsTheWriterFinishItsGracePeriod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := namespace(t, "drain")
	pv := staticClaim(ctx, t, ns, "data")
	selector := "s3.csi.scality.com/volume-name=" + pv.Name // the Mountpoint Pod's label, given to the writer too
	labels := map[string]string{"s3.csi.scality.com/volume-name": pv.Name}
	script := fmt.Sprintf(`f=0
trap 'i=0; while [ $i -lt %d ]; do i=$((i+1)); echo $i > /data/$HOSTNAME-term-$i.txt || f=$((f+1)); sleep 0.5; done; echo failures=$f > /data/$HOSTNAME-done.txt; exit 0' TERM
echo started > /data/$HOSTNAME-start.txt
while true; do sleep 1; done`, termWrites)
	writer := busybox(ns, "writer", script, claimVolume("data", "data"))
	writer.Spec.RestartPolicy = corev1.RestartPolicyAlways
	writer.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: writer.Spec},
		},
	}
	create(ctx, t, deploy)
	first := runningPodOf(ctx, t, ns, labels, "")
	eventually(ctx, t, "the writer's start file in the bucket", func() error {
		_, err := objectE(ctx, bucketOf(pv), first.Name+"-start.txt")
		return err
	})
	mp := onlyMountpointPod(ctx, t, pv.Name)

	t.Cleanup(func() {
		var out bytes.Buffer
		if err := cfg.Kubectl(context.Background(), &out, &out, "uncordon", cfg.NodeName); err != nil {
			t.Errorf("uncordon: %v: %s", err, out.String())
		}
	})
	start := time.Now()
	var out bytes.Buffer
	if err := cfg.Kubectl(ctx, &out, &out, "drain", cfg.NodeName, "--ignore-daemonsets", "--delete-emptydir-data",
		"--pod-selector", selector, "--timeout=3m"); err != nil {
		t.Fatalf("kubectl drain: %v:\n%s", err, out.String())
	}
	t.Logf("kubectl drain took %v:\n%s", time.Since(start).Round(10*time.Millisecond), out.String())
	if !strings.Contains(out.String(), "evicting pod "+mountpointNamespace+"/"+mp.Name) {
		t.Errorf("the drain did not evict the Mountpoint Pod %s", mp.Name)
	}

	if got, err := objectE(ctx, bucketOf(pv), first.Name+"-done.txt"); err != nil || got != "failures=0\n" {
		t.Fatalf("the writer's report of its grace period: %q, %v; want failures=0 (a failed write, or a mount gone before it finished)", got, err)
	}
	for i := 1; i <= termWrites; i++ {
		if got, err := objectE(ctx, bucketOf(pv), fmt.Sprintf("%s-term-%d.txt", first.Name, i)); err != nil || got != fmt.Sprintf("%d\n", i) {
			t.Errorf("file %d written after SIGTERM: %q, %v", i, got, err)
		}
	}
	// Its mounter handed the mount over once the writer had closed its last file: the pod that
	// replaces it under the same name serves the writer's last moments, and goes after it.
	uid := mp.UID
	if err := getPod(ctx, &mp); err == nil && mp.UID == uid {
		t.Errorf("the Mountpoint Pod %s is still there after the drain (phase %s)", mp.Name, mp.Status.Phase)
	}

	out.Reset()
	if err := cfg.Kubectl(ctx, &out, &out, "uncordon", cfg.NodeName); err != nil {
		t.Fatalf("uncordon: %v: %s", err, out.String())
	}
	second := runningPodOf(ctx, t, ns, labels, first.Name)
	eventually(ctx, t, "the new writer's start file in the bucket", func() error {
		_, err := objectE(ctx, bucketOf(pv), second.Name+"-start.txt")
		return err
	})
	t.Logf("from the drain's start to the writer running again after uncordon: %v", time.Since(start).Round(10*time.Millisecond))
}

// runningPodOf waits for a Running pod with the labels in ns other than the one named except.
func runningPodOf(ctx context.Context, t testing.TB, ns string, labels map[string]string, except string) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	eventually(ctx, t, "a Running pod of the Deployment", func() error {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return err
		}
		var phases []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Name != except && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				found = p
				return nil
			}
			state := p.Name + " " + string(p.Status.Phase)
			if p.Status.Phase == corev1.PodPending {
				state += " (events: " + podEvents(ctx, p) + ")"
			}
			phases = append(phases, state)
		}
		return fmt.Errorf("pods: %v", phases)
	})
	return found
}
