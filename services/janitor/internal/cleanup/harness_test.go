package cleanup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

// env is the one API server of this package's tests; tests use unique node and object names.
var env *testenv.APIServer

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	if env, err = testenv.StartAPIServerE(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mppod.DefaultNamespace}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		fmt.Fprintln(os.Stderr, "create Mountpoint namespace:", err)
		_ = env.Stop()
		return 1
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if code == 0 {
		if err := goleak.Find(goleakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			return 1
		}
	}
	return code
}

func goleakOptions() []goleak.Option {
	return []goleak.Option{
		// controller-runtime wraps metadata watches in watch.Filter, whose loop blocks on a send
		// nobody receives once the informer stopped (apimachinery v0.34).
		goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop"),
	}
}

// recorder is a Notifier that keeps what it is told.
type recorder struct {
	mu    sync.Mutex
	ids   []string
	notes []proto.Message
}

func (r *recorder) Notify(id string, p proto.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
	r.notes = append(r.notes, p)
}

// The recorder's queries take a node: tests share the API server, and a sweep also cleans
// what earlier tests left behind.

func (r *recorder) cleaned(node string) []*eventspb.AttachmentCleaned {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*eventspb.AttachmentCleaned
	for _, n := range r.notes {
		if c, ok := n.(*eventspb.AttachmentCleaned); ok && c.Node == node {
			out = append(out, c)
		}
	}
	return out
}

func (r *recorder) unmountRequests(node string) []*eventspb.MountpointNeedsUnmount {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*eventspb.MountpointNeedsUnmount
	for _, n := range r.notes {
		if c, ok := n.(*eventspb.MountpointNeedsUnmount); ok && c.Node == node {
			out = append(out, c)
		}
	}
	return out
}

func (r *recorder) count(node string) int {
	return len(r.cleaned(node)) + len(r.unmountRequests(node))
}

// hookWriter calls before ahead of every write, so a test can race the janitor or fail it.
type hookWriter struct {
	Writer
	before func(op string, obj client.Object) error
}

func (w hookWriter) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := w.before("update", obj); err != nil {
		return err
	}
	return w.Writer.Update(ctx, obj, opts...)
}

func (w hookWriter) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	if err := w.before("patch", obj); err != nil {
		return err
	}
	return w.Writer.Patch(ctx, obj, p, opts...)
}

func (w hookWriter) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := w.before("delete", obj); err != nil {
		return err
	}
	return w.Writer.Delete(ctx, obj, opts...)
}

// harness is a janitor on its own manager (caches, no leader election) against env.
type harness struct {
	t        testing.TB
	ctx      context.Context
	c        client.Client
	j        *Janitor
	triggers *Triggers
	rec      *recorder
	clock    *testClock
	metrics  *Metrics
}

type harnessOptions struct {
	cfg    func(*Config)
	writer func(Writer) Writer
	// triggers starts the targeted checks (informer and event triggered).
	triggers bool
	// config replaces env.Config, e.g. to count requests.
	config *rest.Config
	// quiet drops the janitor's logs (benchmarks).
	quiet bool
}

func testConfig(clock *testClock) Config {
	return Config{
		MountpointNamespace: mppod.DefaultNamespace,
		SweepInterval:       time.Hour,
		StaleAfter:          time.Minute,
		UnmountGrace:        10 * time.Minute,
		NodeGoneGrace:       time.Minute,
		TriggerDelay:        100 * time.Millisecond,
		Now:                 clock.Now,
	}
}

func newHarness(t testing.TB, o harnessOptions) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := env.Config
	if o.config != nil {
		cfg = o.config
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme: env.Scheme, Cache: CacheOptions(), Logger: logr.Discard(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatalf("create manager: %v", err)
	}
	if err := Indexes(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatalf("register indexes: %v", err)
	}
	clock := &testClock{}
	jcfg := testConfig(clock)
	if o.cfg != nil {
		o.cfg(&jcfg)
	}
	var w Writer = mgr.GetClient()
	if o.writer != nil {
		w = o.writer(w)
	}
	rec := &recorder{}
	metrics := NewMetrics(prometheus.NewRegistry())
	j := New(jcfg, mgr.GetCache(), mgr.GetAPIReader(), w, rec, metrics, logFor(t, o.quiet))
	h := &harness{t: t, ctx: ctx, c: env.Client, j: j, rec: rec, clock: clock, metrics: metrics}
	if o.triggers {
		h.triggers = NewTriggers(j, mgr.GetCache())
		if err := mgr.Add(h.triggers); err != nil {
			t.Fatalf("add triggers: %v", err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
	if h.triggers != nil {
		select {
		case <-h.triggers.Ready():
		case <-time.After(20 * time.Second):
			t.Fatal("targeted checks did not start within 20s")
		}
	}
	return h
}

// create creates objs and deletes them when the test ends.
func logFor(t testing.TB, quiet bool) logr.Logger {
	tt, ok := t.(*testing.T)
	if quiet || !ok {
		return logr.Discard()
	}
	return testr.NewWithOptions(tt, testr.Options{Verbosity: 1})
}

func (h *harness) create(objs ...client.Object) {
	h.t.Helper()
	for _, o := range objs {
		if err := h.c.Create(h.ctx, o); err != nil {
			h.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
		h.t.Cleanup(func() {
			// A fresh context: the harness's is canceled by then.
			if err := h.c.Delete(context.Background(), o, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				h.t.Errorf("delete %s: %v", o.GetName(), err)
			}
		})
	}
}

// setPhase moves a pod to phase, as the kubelet would.
func (h *harness) setPhase(pod *corev1.Pod, phase corev1.PodPhase) {
	h.t.Helper()
	pod.Status.Phase = phase
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		h.t.Fatalf("set phase of %s: %v", pod.Name, err)
	}
}

// waitCached waits until the janitor's caches hold objs at their current resourceVersion, so
// that a sweep sees them.
func (h *harness) waitCached(objs ...client.Object) {
	h.t.Helper()
	for _, o := range objs {
		var probe client.Object
		switch o.(type) {
		case *corev1.Pod:
			probe = newPodMeta()
		case *corev1.Node:
			probe = newNodeMeta()
		default:
			probe = o.DeepCopyObject().(client.Object)
		}
		h.eventually(fmt.Sprintf("%s in cache", o.GetName()), func() error {
			if err := h.j.cache.Get(h.ctx, client.ObjectKeyFromObject(o), probe); err != nil {
				return err
			}
			if probe.GetResourceVersion() != o.GetResourceVersion() {
				return fmt.Errorf("cached at %s, want %s", probe.GetResourceVersion(), o.GetResourceVersion())
			}
			return nil
		})
	}
}

// waitUncached waits until the janitor's caches no longer hold obj.
func (h *harness) waitUncached(o client.Object, probe client.Object) {
	h.t.Helper()
	h.eventually(o.GetName()+" gone from cache", func() error {
		err := h.j.cache.Get(h.ctx, client.ObjectKeyFromObject(o), probe)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.New("still cached")
	})
}

func (h *harness) sweep() SweepResult {
	h.t.Helper()
	res, err := h.j.Sweep(h.ctx)
	if err != nil {
		h.t.Fatalf("Sweep() = %v", err)
	}
	return res
}

func (h *harness) eventually(what string, cond func() error) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not within 20s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get re-reads obj from the API server; false when it is gone or being deleted (without a
// kubelet, a deleted pod bound to a node stays terminating).
func (h *harness) get(obj client.Object) bool {
	h.t.Helper()
	err := h.c.Get(h.ctx, client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		h.t.Fatalf("get %s: %v", obj.GetName(), err)
	}
	return obj.GetDeletionTimestamp() == nil
}
