//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What users judge s3csi by on a node: how long their pod takes to start, and what a burst of
// pods costs. Run with `make bench-cluster` (part of `make bench`); the figures are in
// docs/performance.md.
var (
	podStartSamples = flag.Int("podstart-samples", 20, "pods started per case in BenchmarkPodStart")
	scalePods       = flag.Int("scale-pods", 100, "pods created at once in BenchmarkPodsOnVolumesAtOnce")
	scaleVolumes    = flag.Int("scale-volumes", 10, "volumes those pods share in BenchmarkPodsOnVolumesAtOnce")
)

// BenchmarkPodStart times pod creation to Running, as seen by a watch of the API server, one pod
// at a time, for: (a) a pod with an emptyDir only, kubelet's own floor; (b) the first pod on a
// volume, which gets a new Mountpoint Pod; (c) a second pod on a volume already mounted on the
// node; (d) the same as (c) with NATS scaled to 0, where the node-agent learns of the attachment
// by re-reading it. Each case reports p50 and p99 (of 20 samples the p99 is the slowest), its
// p50 over (a)'s, and the mean as ns/op. Each pod is deleted, and gone, before the next starts.
func BenchmarkPodStart(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ns := namespace(b, "podstart")
	w := watchRunning(ctx, b, ns)
	n := *podStartSamples
	var floor time.Duration

	b.Run("a-emptyDir", func(b *testing.B) {
		floor = benchStarts(ctx, b, w, 0, n, func(i int) *corev1.Pod {
			return sleeper(ns, fmt.Sprintf("empty-%d", i), scratchVolume())
		}, nil)
	})

	b.Run("b-first-pod-on-a-volume", func(b *testing.B) {
		pvs := make([]string, n)
		for i := range pvs {
			pvs[i] = boundClaim(ctx, b, ns, fmt.Sprintf("first-%d", i))
		}
		benchStarts(ctx, b, w, floor, n, func(i int) *corev1.Pod {
			return sleeper(ns, fmt.Sprintf("first-%d", i), claimVolume("data", fmt.Sprintf("first-%d", i)))
		}, func(i int) {
			// The next sample starts on a quiet node: this volume's Mountpoint Pod is gone.
			eventually(ctx, b, "no Mountpoint Pod for "+pvs[i], func() error {
				if _, mps, err := attachmentsOf(ctx, pvs[i]); err != nil || len(mps) > 0 {
					return fmt.Errorf("%d Mountpoint Pods (%w)", len(mps), err)
				}
				return nil
			})
		})
	})

	pv := boundClaim(ctx, b, ns, "shared")
	holder := sleeper(ns, "holder", claimVolume("data", "shared"))
	create(ctx, b, holder)
	waitRunning(ctx, b, holder)
	second := func(prefix string) func(int) *corev1.Pod {
		return func(i int) *corev1.Pod {
			return sleeper(ns, fmt.Sprintf("%s-%d", prefix, i), claimVolume("data", "shared"))
		}
	}
	oneSource := func(int) {
		if _, mps, err := attachmentsOf(ctx, pv); err != nil || len(mps) != 1 {
			b.Fatalf("the second pods did not share the holder's Mountpoint Pod: %d Mountpoint Pods (%v)", len(mps), err)
		}
	}

	b.Run("c-second-pod-on-a-mounted-volume", func(b *testing.B) {
		benchStarts(ctx, b, w, floor, n, second("second"), oneSource)
		// The Mountpoint Pod has mounted its source for the holder, then served n pods one after
		// another; nothing reads now, so this is what a mount costs a node while it waits.
		b.ReportMetric(mounterRSS(ctx, b, pv), "idle-mounter-rss-MiB")
	})

	b.Run("d-second-pod-with-NATS-down", func(b *testing.B) {
		scaleNATS(ctx, b, 0)
		defer scaleNATS(context.WithoutCancel(ctx), b, 1)
		benchStarts(ctx, b, w, floor, n, second("fallback"), oneSource)
	})
}

// benchStarts starts n pods one at a time, each made by podAt(i), and reports their start times;
// after(i), when set, runs once pod i is gone. It returns the p50.
func benchStarts(ctx context.Context, b *testing.B, w *runningWatch, floor time.Duration, n int,
	podAt func(int) *corev1.Pod, after func(int),
) time.Duration {
	b.Helper()
	var all []time.Duration
	for range b.N {
		for i := range n {
			pod := podAt(i)
			pod.Name = fmt.Sprintf("%s-%d", pod.Name, len(all)) // unique across b.N rounds
			start := time.Now()
			create(ctx, b, pod)
			all = append(all, w.wait(ctx, b, pod.Name).Sub(start))
			deleteAndWait(ctx, b, pod)
			if after != nil {
				after(i)
			}
		}
	}
	p50, p99 := percentile(all, 50), percentile(all, 99)
	b.Logf("pod starts in order, ms: %v", msList(all))
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(all)), "ns/op")
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	if floor > 0 {
		b.ReportMetric(ms(p50-floor), "p50-over-emptyDir-ms")
	}
	return p50
}

// BenchmarkPodsOnVolumesAtOnce creates 100 pods at once (-scale-pods) from ten clients, first
// with an emptyDir only (kubelet's own floor for such a burst), then over 10 volumes
// (-scale-volumes). It reports the time until all run; for the volumes, the Mountpoint Pods made
// (one per volume, or the benchmark fails); the Kubernetes API requests the s3csi services made
// per pod (leader-election renewals in the window included); the CPU the node-agent and the
// pod-reconcilers used and their peak RSS. It then deletes every pod and reports the time until
// no pod, and for the volumes no mount, Mountpoint Pod or attachment, is left.
func BenchmarkPodsOnVolumesAtOnce(b *testing.B) {
	empty, shared := namespace(b, "burst-empty"), namespace(b, "burst")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	pods, volumes := *scalePods, *scaleVolumes
	b.Run("emptyDir", func(b *testing.B) {
		for range b.N {
			burst(ctx, b, empty, pods, func(i int) *corev1.Pod {
				return sleeper(empty, fmt.Sprintf("w%d", i), scratchVolume())
			}, nil)
		}
	})
	b.Run("s3-volumes", func(b *testing.B) {
		pvs := make([]string, volumes)
		for v := range pvs {
			pvs[v] = boundClaim(ctx, b, shared, fmt.Sprintf("v%d", v))
		}
		for range b.N {
			burst(ctx, b, shared, pods, func(i int) *corev1.Pod {
				return sleeper(shared, fmt.Sprintf("w%d", i), claimVolume("data", fmt.Sprintf("v%d", i%volumes)))
			}, pvs)
		}
	})
}

// burst creates n pods made by podAt at once and reports the figures BenchmarkPodsOnVolumesAtOnce
// describes; pvs are the volumes they use.
func burst(ctx context.Context, b *testing.B, ns string, n int, podAt func(int) *corev1.Pod, pvs []string) {
	b.Helper()
	w := watchRunning(ctx, b, ns)
	before := serviceFigures(ctx, b)
	peak := sampleRSS(ctx)

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range 10 { // ten clients, as a few controllers and users would
		wg.Go(func() {
			for i := g; i < n; i += 10 {
				errs <- k8s.Create(ctx, podAt(i))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatalf("create a pod: %v", err)
		}
	}
	var last time.Time
	for i := range n {
		if at := w.wait(ctx, b, podAt(i).Name); at.After(last) {
			last = at
		}
	}
	allRunning := last.Sub(start)
	sources := 0
	for _, pv := range pvs {
		_, mps, err := attachmentsOf(ctx, pv)
		if err != nil {
			b.Fatal(err)
		}
		sources += len(mps)
	}
	if sources != len(pvs) {
		b.Fatalf("%d Mountpoint Pods for %d volumes, want one each", sources, len(pvs))
	}
	after := serviceFigures(ctx, b)
	rss := peak()

	start = time.Now()
	if err := k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	eventually(ctx, b, "every pod, mount, Mountpoint Pod and attachment gone", func() error {
		var left corev1.PodList
		if err := k8s.List(ctx, &left, client.InNamespace(ns)); err != nil || len(left.Items) > 0 {
			return fmt.Errorf("%d pods left (%w)", len(left.Items), err)
		}
		for _, pv := range pvs {
			atts, mps, err := attachmentsOf(ctx, pv)
			if err != nil || len(atts)+len(mps) > 0 {
				return fmt.Errorf("%s: %d attachments, %d Mountpoint Pods (%w)", pv, len(atts), len(mps), err)
			}
		}
		for _, m := range mountsUnder(b, cfg.KubeletDir) {
			for _, pv := range pvs {
				if strings.Contains(m, pv) {
					return fmt.Errorf("mount left: %s", m)
				}
			}
		}
		return nil
	})
	teardown := time.Since(start)

	b.ReportMetric(0, "ns/op") // one round is a minute of wall time; the figures below are the result
	b.ReportMetric(allRunning.Seconds(), "all-running-s")
	b.ReportMetric(teardown.Seconds(), "all-gone-s")
	if len(pvs) > 0 {
		b.ReportMetric(float64(sources), "mountpoint-pods")
	}
	b.ReportMetric((after.requests-before.requests)/float64(n), "api-requests/pod")
	b.ReportMetric(after.cpu["node-agent"]-before.cpu["node-agent"], "node-agent-cpu-s")
	b.ReportMetric(after.cpu["pod-reconciler"]-before.cpu["pod-reconciler"], "pod-reconciler-cpu-s")
	b.ReportMetric(rss["node-agent"]/(1<<20), "node-agent-peak-rss-MiB")
	b.ReportMetric(rss["pod-reconciler"]/(1<<20), "pod-reconciler-peak-rss-MiB")
}

// mounterRSS is the resident set, in MiB, of the s3csi-mounter process of volume pv's one
// Mountpoint Pod (VmRSS of the process on this node).
func mounterRSS(ctx context.Context, t testing.TB, pv string) float64 {
	t.Helper()
	_, mps, err := attachmentsOf(ctx, pv)
	if err != nil || len(mps) != 1 {
		t.Fatalf("volume %s: %d Mountpoint Pods, want 1 (%v)", pv, len(mps), err)
	}
	pid := mounterPID(t, string(mps[0].UID))
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				t.Fatalf("VmRSS of s3csi-mounter %d: %q: %v", pid, rest, err)
			}
			return kib / 1024
		}
	}
	t.Fatalf("s3csi-mounter %d has no VmRSS in its status", pid)
	return 0
}

// boundClaim creates a static claim (staticClaim) and waits until it is bound, so that a pod
// timed on it does not wait for the PersistentVolume controller.
func boundClaim(ctx context.Context, t testing.TB, ns, claim string) string {
	t.Helper()
	pv := staticClaim(ctx, t, ns, claim)
	boundVolume(ctx, t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim}})
	return pv.Name
}

// sleeper is a pod that sleeps with the given volumes; asked to stop, it is killed after 1 s, the
// shortest grace period the API server gives a pod deleted without force.
func sleeper(ns, name string, volumes ...corev1.Volume) *corev1.Pod {
	return busybox(ns, name, "exec sleep 3600", volumes...) // busybox's grace period is 1 s
}

// scratchVolume is an emptyDir volume: what a pod of kubelet's floor mounts.
func scratchVolume() corev1.Volume {
	return corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

// deleteAndWait deletes pod as a user does (not forced) and waits until the API server no longer
// has it: kubelet removes it once its containers stopped and its volumes are unmounted.
func deleteAndWait(ctx context.Context, t testing.TB, pod *corev1.Pod) {
	t.Helper()
	if err := k8s.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(ctx, t, "pod "+pod.Name+" gone", func() error {
		if err := getPod(ctx, &corev1.Pod{ObjectMeta: pod.ObjectMeta}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%w)", err)
		}
		return nil
	})
}

// runningWatch records, from one watch of a namespace, when each pod was first seen Running.
type runningWatch struct {
	mu      sync.Mutex
	running map[string]time.Time
	changed chan struct{} // closed and replaced on every record
}

func watchRunning(ctx context.Context, t testing.TB, ns string) *runningWatch {
	t.Helper()
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rest)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	wi, err := cs.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch pods in %s: %v", ns, err)
	}
	w := &runningWatch{running: map[string]time.Time{}, changed: make(chan struct{})}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || pod.Status.Phase != corev1.PodRunning {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			if _, seen := w.running[pod.Name]; !seen {
				w.running[pod.Name] = now
				close(w.changed)
				w.changed = make(chan struct{})
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// wait returns when pod name was first seen Running; the test fails if it is not within 5 minutes.
func (w *runningWatch) wait(ctx context.Context, t testing.TB, name string) time.Time {
	t.Helper()
	deadline := time.After(5 * time.Minute)
	for {
		w.mu.Lock()
		at, ok := w.running[name]
		changed := w.changed
		w.mu.Unlock()
		if ok {
			return at
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("pod %s not Running within 5 minutes; events: %s", name,
				podEvents(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}))
		case <-ctx.Done():
			t.Fatalf("pod %s: %v", name, ctx.Err())
		}
	}
}

// figures are counters summed over the s3csi services' /metrics: the Kubernetes API requests
// of all, and the CPU seconds per service (pod name without the release prefix and pod suffix).
type figures struct {
	requests float64
	cpu      map[string]float64
}

func serviceFigures(ctx context.Context, t testing.TB) figures {
	t.Helper()
	f := figures{cpu: map[string]float64{}}
	for pod, page := range metricsPages(ctx, t) {
		f.requests += metricSum(page, "rest_client_requests_total")
		f.cpu[serviceOf(pod)] += metricSum(page, "process_cpu_seconds_total")
	}
	return f
}

// sampleRSS reads every service's resident memory each 500 ms until the returned function is
// called, which returns the peak per service (summed over its pods).
func sampleRSS(ctx context.Context) func() map[string]float64 {
	sctx, stop := context.WithCancel(ctx)
	done := make(chan map[string]float64)
	go func() {
		peak := map[string]float64{}
		for {
			now := map[string]float64{}
			pages, _ := readMetricsPages(sctx) // a failed scrape is a missing sample
			for pod, page := range pages {
				now[serviceOf(pod)] += metricSum(page, "process_resident_memory_bytes")
			}
			for s, v := range now {
				peak[s] = max(peak[s], v)
			}
			select {
			case <-sctx.Done():
				done <- peak
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() map[string]float64 { stop(); return <-done }
}

// serviceOf maps a pod name such as s3csi-node-agent-x7k2p or s3csi-pod-reconciler-5d9c-abcde to
// its service.
func serviceOf(pod string) string {
	for _, s := range []string{"node-agent", "pod-reconciler", "controller", "janitor", "nats"} {
		if strings.Contains(pod, s) {
			return s
		}
	}
	return pod
}

// metricSum adds up every sample of metric name in a Prometheus text page.
func metricSum(page []byte, name string) float64 {
	var sum float64
	s := bufio.NewScanner(bytes.NewReader(page))
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		line := s.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest == "" || (rest[0] != ' ' && rest[0] != '{')) {
			continue
		}
		fields := strings.Fields(line[strings.LastIndex(line, "}")+1:])
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// percentile is the p-th percentile of ds by the nearest-rank method.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func msList(ds []time.Duration) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Milliseconds()
	}
	return out
}
