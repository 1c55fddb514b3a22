package reconciler

import (
	"flag"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"
)

var (
	benchPods    = flag.Int("bench-pods", 1000, "workload pods of BenchmarkBoundToAssigned")
	benchNodes   = flag.Int("bench-nodes", 50, "nodes the pods are spread over")
	benchClaims  = flag.Int("bench-claims", 20, "claims the pods share (pod i mounts claim i mod claims)")
	benchWorkers = flag.Int("bench-concurrency", DefaultMaxConcurrentReconciles, "concurrent reconciles per controller")
)

// countingTransport counts the requests the reconciler sends to the API server.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// BenchmarkBoundToAssigned schedules -bench-pods workloads over -bench-nodes nodes at once
// (binding subresource, 16 concurrent clients) and measures, against the real API server, the
// time from each binding to the workload appearing in an attachment (seen on a watch):
// workloads/s, p50 and p99 latency, the reconciler's API requests per workload, and memory
// (Go heap in use after GC, peak RSS of the whole test process, which also holds the
// benchmark's clients and watch).
func BenchmarkBoundToAssigned(b *testing.B) {
	for range b.N {
		runBoundToAssigned(b)
	}
}

func runBoundToAssigned(b *testing.B) {
	h := newHarness(b)
	h.log = logr.Discard()
	var requests atomic.Int64
	cfg := rest.CopyConfig(api.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, n: &requests} }
	h.restConfig = cfg
	h.cfg.MaxConcurrentReconciles = *benchWorkers

	for i := range *benchClaims {
		h.volume(fmt.Sprintf("claim-%d", i))
	}
	pods := make([]*corev1.Pod, *benchPods)
	for i := range pods {
		pods[i] = fixture.Pod(fmt.Sprintf("w-%d", i), fixture.InNamespace(h.ns), fixture.WithClaim("vol", fmt.Sprintf("claim-%d", i%*benchClaims)))
		h.create(pods[i])
	}
	assignedAt, stopWatch := watchAssignments(b, h)
	h.start()
	time.Sleep(time.Second) // caches synced, nothing to do yet
	startRequests := requests.Load()

	boundAt := make([]time.Time, len(pods))
	start := time.Now()
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(pods); i = int(next.Add(1) - 1) {
				node := fmt.Sprintf("%s-%d", h.node, i%*benchNodes)
				if err := h.c.SubResource("binding").Create(h.ctx, pods[i], fixture.Binding(pods[i], node)); err != nil {
					b.Errorf("bind %s: %v", pods[i].Name, err)
					return
				}
				boundAt[i] = time.Now()
			}
		})
	}
	wg.Wait()
	latencies := make([]time.Duration, len(pods))
	h.eventuallyWithin(5*time.Minute, "every workload is assigned", func() error {
		missing := 0
		for i, p := range pods {
			if t, ok := assignedAt(string(p.UID)); ok {
				latencies[i] = t.Sub(boundAt[i])
			} else {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d workloads not assigned", missing, len(pods))
		}
		return nil
	})
	var last time.Time
	for _, p := range pods {
		t, _ := assignedAt(string(p.UID))
		last = maxTime(last, t)
	}
	elapsed := last.Sub(start)
	used := requests.Load() - startRequests
	stopWatch()

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	h.stopManager()

	slices.Sort(latencies)
	b.ReportMetric(float64(len(pods))/elapsed.Seconds(), "workloads/s")
	b.ReportMetric(float64(latencies[len(latencies)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(float64(used)/float64(len(pods)), "api-requests/workload")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MiB")
	b.ReportMetric(float64(len(h.attachments(h.node+"-0"))), "attachments-on-node-0")
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// watchAssignments records when each workload UID first appears in an S3PA.
func watchAssignments(tb testing.TB, h *harness) (assignedAt func(uid string) (time.Time, bool), stop func()) {
	tb.Helper()
	wc, err := client.NewWithWatch(api.Config, client.Options{Scheme: api.Scheme})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := wc.Watch(h.ctx, &s3csiv2.MountpointS3PodAttachmentList{})
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			a, ok := ev.Object.(*s3csiv2.MountpointS3PodAttachment)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			mu.Lock()
			for _, uid := range uids(a) {
				if _, ok := seen[uid]; !ok {
					seen[uid] = now
				}
			}
			mu.Unlock()
		}
	}()
	return func(uid string) (time.Time, bool) {
			mu.Lock()
			defer mu.Unlock()
			t, ok := seen[uid]
			return t, ok
		}, func() {
			w.Stop()
			<-done
		}
}
