package cleanup

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// Scale of the benchmark cluster.
const (
	benchNodes       = 500
	benchAttachments = 10_000
	benchLeaks       = 1_000
	// benchCreators bounds concurrent creates while populating.
	benchCreators = 32
	benchNS       = "bench"
)

// countingTransport counts the requests that reach the API server.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

var populate sync.Once

// populateBench creates benchNodes Nodes and benchAttachments attachments spread evenly over
// them, each with a live workload pod and its Mountpoint Pod: the steady state of a big cluster.
func populateBench(b *testing.B) {
	b.Helper()
	var err error
	populate.Do(func() {
		start := time.Now()
		err = createAll(benchNodes, func(i int) []client.Object { return []client.Object{nodeObject(benchNode(i))} })
		if err == nil {
			err = env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}})
		}
		if err == nil {
			err = createAll(benchAttachments, func(i int) []client.Object {
				node := benchNode(i % benchNodes)
				pod := workloadPod(benchNS, fmt.Sprintf("w-%d", i), node)
				mp := mountpointPod(fmt.Sprintf("mp-bench-%d", i), node)
				return []client.Object{pod, mp, &lazyAttachment{pod: pod, mp: mp, name: fmt.Sprintf("s3pa-bench-%d", i)}}
			})
		}
		b.Logf("populated %d nodes, %d attachments, %d workload pods and %d Mountpoint Pods in %s",
			benchNodes, benchAttachments, benchAttachments, benchAttachments, time.Since(start).Round(time.Second))
	})
	if err != nil {
		b.Fatal(err)
	}
}

func benchNode(i int) string { return fmt.Sprintf("bench-node-%03d", i) }

// lazyAttachment is an attachment built once its workload pod exists (it needs the pod's UID).
type lazyAttachment struct {
	client.Object
	pod, mp *corev1.Pod
	name    string
}

// createAll creates the objects of n items with bounded concurrency, each item's in order.
func createAll(n int, objects func(i int) []client.Object) error {
	var g errgroup.Group
	g.SetLimit(benchCreators)
	for i := range n {
		g.Go(func() error {
			for _, o := range objects(i) {
				if l, ok := o.(*lazyAttachment); ok {
					o = attachment(l.name, l.pod.Spec.NodeName, withWorkload(l.mp.Name, string(l.pod.UID), longAgo))
				}
				if err := env.Client.Create(context.Background(), o); err != nil {
					return fmt.Errorf("create %s: %w", o.GetName(), err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// BenchmarkSweep measures full sweeps of 10,000 attachments over 500 nodes against the real API
// server: a clean cluster (everything in use), and one where 1,000 attachments have leaked
// (their workload is gone), each sweep then removing them and asking their Mountpoint Pods to
// unmount. It reports the API requests each sweep made.
func BenchmarkSweep(b *testing.B) {
	populateBench(b)
	var requests atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, n: &requests} })
	h := newHarness(b, harnessOptions{config: cfg, quiet: true})
	h.eventually("caches hold the benchmark cluster", func() error {
		var list s3csiv2.MountpointS3PodAttachmentList
		if err := h.j.cache.List(h.ctx, &list, readOnly); err != nil {
			return err
		}
		pods := newPodMetaList()
		if err := h.j.cache.List(h.ctx, pods, client.InNamespace(benchNS), readOnly); err != nil {
			return err
		}
		if len(list.Items) < benchAttachments || len(pods.Items) < benchAttachments {
			return fmt.Errorf("%d attachments, %d workload pods cached", len(list.Items), len(pods.Items))
		}
		return nil
	})

	b.Run("clean", func(b *testing.B) {
		// A first sweep starts the Node informer (a list and a watch); measure the steady state.
		if _, err := h.j.Sweep(h.ctx); err != nil {
			b.Fatal(err)
		}
		requests.Store(0)
		b.ResetTimer()
		for b.Loop() {
			if _, err := h.j.Sweep(h.ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(requests.Load())/float64(b.N), "requests/sweep")
	})

	b.Run(fmt.Sprintf("%d-leaks", benchLeaks), func(b *testing.B) {
		var total, removed int64
		for iter := 0; b.Loop(); iter++ {
			b.StopTimer()
			leaked := makeLeaks(b, h, iter)
			requests.Store(0)
			b.StartTimer()
			if _, err := h.j.Sweep(h.ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			total += requests.Load()
			for _, s := range leaked {
				if !h.get(s) {
					removed++
				}
			}
			b.StartTimer()
		}
		if removed != int64(benchLeaks*b.N) {
			b.Fatalf("removed %d leaked attachments, want %d", removed, benchLeaks*b.N)
		}
		b.ReportMetric(float64(total)/float64(b.N), "requests/sweep")
		b.ReportMetric(float64(total)/float64(benchLeaks*b.N), "requests/leak")
	})
}

// makeLeaks creates benchLeaks attachments whose workload never existed, spread over the nodes,
// each with its Mountpoint Pod, and waits until the janitor's cache holds them.
func makeLeaks(b *testing.B, h *harness, iter int) []*s3csiv2.MountpointS3PodAttachment {
	b.Helper()
	leaked := make([]*s3csiv2.MountpointS3PodAttachment, benchLeaks)
	err := createAll(benchLeaks, func(i int) []client.Object {
		node := benchNode(i % benchNodes)
		mp := mountpointPod(fmt.Sprintf("mp-leak-%d-%d", iter, i), node)
		leaked[i] = attachment(fmt.Sprintf("s3pa-leak-%d-%d", iter, i), node,
			withWorkload(mp.Name, fmt.Sprintf("gone-%d-%d", iter, i), longAgo))
		return []client.Object{mp, leaked[i]}
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range leaked {
		h.waitCached(s)
	}
	return leaked
}
