//go:build e2e

package e2e

import (
	"context"
	"crypto/md5" //nolint:gosec // a checksum of test data
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/fixture"
)

// The mounter of a Mountpoint Pod killed under a running reader (S1, S3): kubelet restarts the
// container, the node-agent hands it the FUSE connection it kept, and the reader goes on without
// an error and without a restart: a file it held open reads on to the right checksum, new opens
// and listings work, and it gets a MountpointReplaced Warning that names the kill.
func TestAMounterKilledUnderARunningReaderIsReplacedWithoutAnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "killed")
	pv := staticClaim(ctx, t, ns, "data")
	reader, big := startHeldReader(ctx, t, ns, pv)
	mp := onlyMountpointPod(ctx, t, pv.Name)
	pid := mounterPID(t, string(mp.UID))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the mounter (pid %d): %v", pid, err)
	}
	killed := time.Now()
	eventually(ctx, t, "a MountpointReplaced Warning on the reader naming the kill", func() error {
		events := podEvents(ctx, reader)
		killedBy := strings.Contains(events, "exited with code 137") || strings.Contains(events, "killed by signal 9")
		if !strings.Contains(events, "Warning MountpointReplaced") || !killedBy {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})
	t.Logf("from the kill to the reader's MountpointReplaced Warning: %v", time.Since(killed).Round(10*time.Millisecond))
	heldReaderReadsOn(ctx, t, reader, pv, big, "the kill")
}

// startHeldReader writes a 32 MiB object to pv's bucket and starts a reader that holds it open,
// reads its first MiB (HELD-OPEN), then reads seed.txt every 200 ms (READ-OK or READ-FAILED)
// until go.txt appears, and then reads the held file to its end (HELD-DONE <md5>) and lists the
// volume (LIST-OK); it returns the reader and the object's content.
func startHeldReader(ctx context.Context, t testing.TB, ns string, pv *corev1.PersistentVolume) (*corev1.Pod, string) {
	t.Helper()
	big := strings.Repeat("0123456789abcdef", 2<<20) // 32 MiB
	if err := cfg.MakeBucket(ctx, bucketOf(pv), "big.bin", big); err != nil {
		t.Fatal(err)
	}
	reader := busybox(ns, "reader", `exec 3</data/big.bin
dd bs=4096 count=256 <&3 >/dev/null 2>&1 && echo HELD-OPEN
while [ ! -e /data/go.txt ]; do cat /data/seed.txt >/dev/null 2>&1 && echo READ-OK || echo READ-FAILED; sleep 0.2; done
if sum=$(cat <&3 | md5sum); then echo "HELD-DONE ${sum%% *}"; else echo HELD-FAILED; fi
ls /data >/dev/null && echo LIST-OK || echo LIST-FAILED
sleep 3600`, claimVolume("data", "data"))
	create(ctx, t, reader)
	waitRunning(ctx, t, reader)
	eventually(ctx, t, "the reader holding big.bin open", func() error {
		if !strings.Contains(podLog(ctx, t, reader), "HELD-OPEN") {
			return fmt.Errorf("log: %s", podLog(ctx, t, reader))
		}
		return nil
	})
	return reader, big
}

// heldReaderReadsOn checks, after what, that the reader of startHeldReader opens files again, reads
// its held file to the right checksum, lists the volume, saw no error, was not restarted, and
// that a new pod mounts the volume.
func heldReaderReadsOn(ctx context.Context, t testing.TB, reader *corev1.Pod, pv *corev1.PersistentVolume, big, what string) {
	t.Helper()
	before := strings.Count(podLog(ctx, t, reader), "READ-OK")
	eventually(ctx, t, "the reader opening files again", func() error {
		if got := strings.Count(podLog(ctx, t, reader), "READ-OK"); got < before+3 {
			return fmt.Errorf("%d successful reads, want %d", got, before+3)
		}
		return nil
	})
	if err := cfg.MakeBucket(ctx, bucketOf(pv), "go.txt", "go"); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "the held handle read to its end", func() error {
		if out := podLog(ctx, t, reader); !strings.Contains(out, "LIST-") {
			return fmt.Errorf("log: %s", out)
		}
		return nil
	})
	out := podLog(ctx, t, reader)
	want := fmt.Sprintf("HELD-DONE %x", md5.Sum([]byte(big[1<<20:]))) //nolint:gosec // a checksum of test data
	if !strings.Contains(out, want) || !strings.Contains(out, "LIST-OK") || strings.Contains(out, "FAILED") {
		t.Fatalf("the reader saw an error or a wrong checksum across %s (want %q):\n%s", what, want, out)
	}
	if err := getPod(ctx, reader); err != nil {
		t.Fatal(err)
	}
	for _, c := range reader.Status.ContainerStatuses {
		if c.RestartCount != 0 {
			t.Fatalf("the reader's container %s restarted %d times", c.Name, c.RestartCount)
		}
	}
	next := busybox(reader.Namespace, "next", "cat /data/seed.txt", claimVolume("data", "data"))
	create(ctx, t, next)
	if out := waitPodDone(ctx, t, next); out != "seed" {
		t.Errorf("the next pod read %q, want seed", out)
	}
}

// A mounter that stops answering (SIGSTOP stands for a deadlock or a starved node) under a
// reader: the node-agent reports it on the reader within two health periods, kubelet reports the
// volume's condition from NodeGetVolumeStats, and once the mounter runs again the reader goes on
// with no error.
func TestAStoppedMounterIsReportedAndTheReaderGoesOnWhenItResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "stopped")
	pv := staticClaim(ctx, t, ns, "data")
	reader := busybox(ns, "reader", "while true; do cat /data/seed.txt >/dev/null 2>&1 && echo READ-OK || echo READ-FAILED; sleep 0.5; done",
		claimVolume("data", "data"))
	create(ctx, t, reader)
	waitRunning(ctx, t, reader)
	mp := onlyMountpointPod(ctx, t, pv.Name)
	pid := mounterPID(t, string(mp.UID))
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the mounter (pid %d): %v", pid, err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	stopped := time.Now()
	eventually(ctx, t, "a MountpointNotResponding Warning on the reader", func() error {
		if events := podEvents(ctx, reader); !strings.Contains(events, "Warning MountpointNotResponding") || !strings.Contains(events, mp.Name) {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})
	t.Logf("from the stop to the node-agent's Warning: %v", time.Since(stopped).Round(10*time.Millisecond))
	eventually(ctx, t, "kubelet's VolumeConditionAbnormal on the reader", func() error {
		if events := podEvents(ctx, reader); !strings.Contains(events, "Warning VolumeConditionAbnormal") || !strings.Contains(events, "does not answer") {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})
	t.Logf("from the stop to kubelet's VolumeConditionAbnormal: %v", time.Since(stopped).Round(10*time.Millisecond))

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatalf("resume the mounter: %v", err)
	}
	resumed = true
	before := strings.Count(podLog(ctx, t, reader), "READ-OK")
	eventually(ctx, t, "the reader reading again", func() error {
		if got := strings.Count(podLog(ctx, t, reader), "READ-OK"); got < before+3 {
			return fmt.Errorf("%d successful reads, want %d", got, before+3)
		}
		return nil
	})
	if out := podLog(ctx, t, reader); strings.Contains(out, "READ-FAILED") {
		t.Fatalf("the reader saw an error across the pause:\n%s", out)
	}
}

// A mounter OOM-killed under a writer (S5): its Mountpoint Pod's memory limit, a volume
// attribute, is far below the buffers its mount options give it (without them the mounter
// would fit its buffers under the limit). The mounter kubelet restarts takes the mount over: the
// writer's file fails (its upload died with the mounter), the writer gets a Warning Event that
// names the OOM kill within seconds, and the next pod on the volume mounts and reads.
func TestAnOOMKilledMounterIsReportedAndTheNextPodMounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "oom")
	staticClaim(ctx, t, ns, "data", fixture.WithVolumeAttribute("mountpointContainerResourcesLimitsMemory", "48Mi"),
		fixture.WithMountOptions("max-memory-target=512"))
	writer := busybox(ns, "writer", "dd if=/dev/zero of=/data/big.bin bs=1M count=2048; echo dd-exited-$?; sleep 3600",
		claimVolume("data", "data"))
	started := time.Now()
	create(ctx, t, writer)
	waitRunning(ctx, t, writer)
	eventually(ctx, t, "a Warning Event on the writer naming the OOM kill", func() error {
		if events := podEvents(ctx, writer); !strings.Contains(events, "Warning MountpointReplaced") || !strings.Contains(events, "OOM-killed") {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})
	eventually(ctx, t, "the writer's dd failing", func() error {
		if out := podLog(ctx, t, writer); !strings.Contains(out, "dd-exited-1") {
			return fmt.Errorf("log: %s", out)
		}
		return nil
	})
	t.Logf("from the writer's creation to its Warning Event: %v; its output: %s", time.Since(started).Round(10*time.Millisecond),
		strings.TrimSpace(podLog(ctx, t, writer)))

	next := busybox(ns, "next", "cat /data/seed.txt", claimVolume("data", "data"))
	create(ctx, t, next)
	if out := waitPodDone(ctx, t, next); out != "seed" {
		t.Errorf("the next pod read %q, want seed", out)
	}
}

// mounterPID finds the s3csi-mounter process of the Mountpoint Pod with the given UID among the
// node's processes (the test runs on the node): its cgroup path names the pod.
func mounterPID(t testing.TB, podUID string) int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/comm")
	if err != nil {
		t.Fatal(err)
	}
	uidForms := []string{podUID, strings.ReplaceAll(podUID, "-", "_")}
	for _, comm := range procs {
		name, err := os.ReadFile(comm)
		if err != nil || strings.TrimSpace(string(name)) != "s3csi-mounter" {
			continue
		}
		dir := filepath.Dir(comm)
		cgroup, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil {
			continue
		}
		for _, u := range uidForms {
			if strings.Contains(string(cgroup), u) {
				pid, err := strconv.Atoi(filepath.Base(dir))
				if err != nil {
					t.Fatal(err)
				}
				return pid
			}
		}
	}
	t.Fatalf("no s3csi-mounter process of pod %s on the node", podUID)
	return 0
}

// NATS down for the whole test (S20): a pod still mounts, through the fallback re-reads of the
// API server; the time it took is logged. NATS is brought back at the end.
func TestMountsWorkWithNATSDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := namespace(t, "nats-down")
	staticClaim(ctx, t, ns, "data")
	scaleNATS(ctx, t, 0)
	t.Cleanup(func() { scaleNATS(context.WithoutCancel(ctx), t, 1) })

	start := time.Now()
	pod := busybox(ns, "w", "set -e\necho written > /data/w.txt\ncat /data/seed.txt", claimVolume("data", "data"))
	create(ctx, t, pod)
	if out := waitPodDone(ctx, t, pod); out != "seed" {
		t.Errorf("the pod read %q, want seed", out)
	}
	t.Logf("with NATS down, from creating the pod to its end: %v", time.Since(start).Round(10*time.Millisecond))
}

// scaleNATS sets the replicas of the chart's NATS and waits until that many servers are ready
// (for 0: until no NATS pod is left).
func scaleNATS(ctx context.Context, t testing.TB, replicas int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	sts := &appsv1.StatefulSet{}
	key := client.ObjectKey{Namespace: "s3csi", Name: "s3csi-nats"}
	if err := k8s.Get(ctx, key, sts); err != nil {
		t.Fatalf("get the NATS StatefulSet: %v", err)
	}
	patched := sts.DeepCopy()
	patched.Spec.Replicas = ptr.To(replicas)
	if err := k8s.Patch(ctx, patched, client.MergeFrom(sts)); err != nil {
		t.Fatalf("scale NATS to %d: %v", replicas, err)
	}
	eventually(ctx, t, fmt.Sprintf("NATS at %d ready servers", replicas), func() error {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace("s3csi"), client.MatchingLabels(sts.Spec.Selector.MatchLabels)); err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		if int32(len(pods.Items)) != replicas || int32(ready) != replicas {
			return fmt.Errorf("%d pods, %d ready", len(pods.Items), ready)
		}
		return nil
	})
}

// A Mountpoint Pod deleted (an operator, an upgrade) or evicted (a drain, S6) under a running
// reader: its mounter hands the mount over, the pod-reconciler replaces the pod under the same
// name, and the node-agent hands the new pod's mounter the FUSE connection it kept. The reader
// goes on without an error and without a restart: a file it held open reads on to the right
// checksum, new opens and listings work, and it gets a Normal MountpointHandedOver Event.
func TestAMountpointPodDeletedUnderARunningReaderIsReplacedWithoutAnError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		terminate func(context.Context, *corev1.Pod) error
	}{
		{"deleted", func(ctx context.Context, mp *corev1.Pod) error { return k8s.Delete(ctx, mp) }},
		{"evicted", func(ctx context.Context, mp *corev1.Pod) error {
			// What `kubectl drain` does: the Eviction API, which respects PodDisruptionBudgets.
			return k8s.SubResource("eviction").Create(ctx, mp, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: mp.Name, Namespace: mp.Namespace},
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { handedOverUnderARunningReader(t, tc.name, tc.terminate) })
	}
}

func handedOverUnderARunningReader(t testing.TB, how string, terminate func(context.Context, *corev1.Pod) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "mp-"+how)
	pv := staticClaim(ctx, t, ns, "data")
	reader, big := startHeldReader(ctx, t, ns, pv)
	old := onlyMountpointPod(ctx, t, pv.Name)
	if err := terminate(ctx, &old); err != nil {
		t.Fatalf("%s: %v", how, err)
	}
	start := time.Now()
	eventually(ctx, t, "a Normal MountpointHandedOver Event on the reader", func() error {
		if events := podEvents(ctx, reader); !strings.Contains(events, "Normal MountpointHandedOver") {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})
	t.Logf("from the %s Mountpoint Pod to the reader's MountpointHandedOver Event: %v",
		how, time.Since(start).Round(10*time.Millisecond))
	now := onlyMountpointPod(ctx, t, pv.Name)
	if now.Name != old.Name || now.UID == old.UID {
		t.Errorf("Mountpoint Pod after the hand-over: %s (uid %s), want a new pod named %s", now.Name, now.UID, old.Name)
	}
	heldReaderReadsOn(ctx, t, reader, pv, big, "the hand-over")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestAnUnschedulableMountpointPodIsNamedAndMountsOnceCapacityFrees is scenario S15: a pod
// takes the node's free memory, so the Mountpoint Pod of a new workload (512 MiB requested)
// cannot be scheduled. The workload gets a Warning Event naming the scheduler's reason; once the
// pod that held the memory goes, the Mountpoint Pod is scheduled and the workload mounts and
// runs with no action of anyone.
func TestAnUnschedulableMountpointPodIsNamedAndMountsOnceCapacityFrees(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "unschedulable")
	pv := staticClaim(ctx, t, ns, "data", fixture.WithVolumeAttribute("mountpointContainerResourcesRequestsMemory", "512Mi"))

	hog := busybox(ns, "hog", "sleep 3600")
	free := freeMemory(ctx, t)
	hog.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceMemory: *resource.NewQuantity(free-256<<20, resource.BinarySI),
	}
	create(ctx, t, hog)
	waitRunning(ctx, t, hog)

	pod := busybox(ns, "w", "cat /data/seed.txt", claimVolume("data", "data"))
	start := time.Now()
	create(ctx, t, pod)
	eventually(ctx, t, "a MountpointPodUnschedulable event naming the scheduler's reason", func() error {
		if events := podEvents(ctx, pod); !strings.Contains(events, "Warning MountpointPodUnschedulable") || !strings.Contains(events, "Insufficient memory") {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})
	t.Logf("the workload's event named the cause %s after the workload was created", time.Since(start).Round(100*time.Millisecond))

	if err := k8s.Delete(ctx, hog); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	if got := waitPodDone(ctx, t, pod); !strings.Contains(got, "seed") {
		t.Errorf("the workload read %q, want the seeded object", got)
	}
	t.Logf("the workload ran %s after the memory was freed", time.Since(freed).Round(100*time.Millisecond))
	if err := k8s.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "no Mountpoint Pod or attachment left for the volume", func() error {
		atts, mps, err := attachmentsOf(ctx, pv.Name)
		if err != nil {
			return err
		}
		if len(atts)+len(mps) > 0 {
			return fmt.Errorf("%d attachments and %d Mountpoint Pods remain", len(atts), len(mps))
		}
		return nil
	})
}

// freeMemory is the node's allocatable memory less the memory requested by the pods on it that
// have not ended, in bytes: what the scheduler can still give.
func freeMemory(ctx context.Context, t testing.TB) int64 {
	t.Helper()
	var node corev1.Node
	if err := k8s.Get(ctx, client.ObjectKey{Name: cfg.NodeName}, &node); err != nil {
		t.Fatal(err)
	}
	free := node.Status.Allocatable.Memory().Value()
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != cfg.NodeName || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			free -= c.Resources.Requests.Memory().Value()
		}
	}
	return free
}
