package reconciler

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/metrics"
)

// api is one API server for the whole package: each test works in its own namespaces and on
// its own node names, and deletes its pods when it ends.
var api *testenv.APIServer

func TestMain(m *testing.M) {
	var err error
	api, err = testenv.StartAPIServerE()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := api.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

const testVersion = "v9.9.9-test"

var testSeq atomic.Int64

// harness runs the controllers against the shared API server and an embedded NATS.
type harness struct {
	t       testing.TB
	ctx     context.Context
	c       client.Client
	ns      string // workloads
	node    string // default node of the test
	cfg     Config
	nats    *testenv.NATS
	js      jetstream.JetStream
	metrics *metrics.Metrics
	// funcs intercept the manager's client, to inject failures.
	funcs interceptor.Funcs
	// restConfig reaches the API server for the manager (api.Config unless a test wraps it).
	restConfig *rest.Config
	// log receives the manager's and the queue's logs.
	log logr.Logger

	mu   sync.Mutex
	stop func()
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	n := testSeq.Add(1)
	h := &harness{
		t: t, ctx: t.Context(), c: api.Client,
		ns: fmt.Sprintf("work-%d", n), node: fmt.Sprintf("node-%d", n),
		cfg: Config{
			MountpointNamespace: fmt.Sprintf("mount-s3-%d", n),
			DriverVersion:       testVersion,
			Mountpoint:          MountpointPodConfig{Image: "s3csi-mounter:test"},
			SkipNameValidation:  true,
		},
		nats:       testenv.StartNATS(t),
		restConfig: api.Config,
		log:        testr.NewWithInterface(t, testr.Options{}),
	}
	for _, ns := range []string{h.ns, h.cfg.MountpointNamespace} {
		h.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	nc, err := events.Connect(h.ctx, h.nats.URL(), "test", logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if h.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(h.ctx, h.js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.cleanup)
	return h
}

// start runs a manager with the controllers and an event queue until the test ends or
// stopManager is called.
func (h *harness) start() {
	h.t.Helper()
	funcs := h.funcs
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.metrics = m
	mgr, err := manager.New(h.restConfig, manager.Options{
		Scheme:  api.Scheme,
		Cache:   CacheOptions(h.cfg.MountpointNamespace),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Logger:  h.log,
		NewClient: func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, opts)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(c, funcs), nil
		},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	queue := events.NewOutbox(events.NewPublisher(h.js, events.PublisherOptions{}), events.OutboxOptions{Log: h.log})
	ctx, cancel := context.WithCancel(ctrllog.IntoContext(context.WithoutCancel(h.ctx), h.log))
	if _, err := Setup(ctx, mgr, h.cfg, queue, m); err != nil {
		cancel()
		h.t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() { errs <- mgr.Start(ctx) })
	wg.Go(func() { errs <- queue.Start(ctx) })
	h.mu.Lock()
	h.stop = func() {
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				h.t.Errorf("manager stopped with %v", err)
			}
		}
	}
	h.mu.Unlock()
}

func (h *harness) stopManager() {
	h.mu.Lock()
	stop := h.stop
	h.stop = nil
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// cleanup stops the manager and deletes the test's pods, so later tests' managers never see them.
func (h *harness) cleanup() {
	h.stopManager()
	ctx := context.Background()
	for _, ns := range []string{h.ns, h.cfg.MountpointNamespace} {
		_ = h.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))
	}
}

func (h *harness) create(obj client.Object) {
	h.t.Helper()
	if err := h.c.Create(h.ctx, obj); err != nil {
		h.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// volume creates a static s3csi PV named name+suffix and a claim named name bound to it
// both ways, as the PV controller leaves them. It returns the PV name.
func (h *harness) volume(claim string, mods ...fixture.PVMod) string {
	h.t.Helper()
	pvName := h.ns + "-" + claim
	h.create(fixture.PV(pvName, append([]fixture.PVMod{fixture.PreBoundTo(h.ns, claim)}, mods...)...))
	h.create(fixture.PVC(claim, fixture.ClaimInNamespace(h.ns), fixture.WithVolumeName(pvName)))
	return pvName
}

// workload creates a pod in the test namespace and schedules it on node with the binding
// subresource, as kube-scheduler does.
func (h *harness) workload(name, node string, mods ...fixture.PodMod) *corev1.Pod {
	h.t.Helper()
	pod := fixture.Pod(name, append([]fixture.PodMod{fixture.InNamespace(h.ns)}, mods...)...)
	h.create(pod)
	if node != "" {
		h.bind(pod, node)
	}
	return pod
}

func (h *harness) bind(pod *corev1.Pod, node string) {
	h.t.Helper()
	if err := h.c.SubResource("binding").Create(h.ctx, pod, fixture.Binding(pod, node)); err != nil {
		h.t.Fatalf("bind pod %s to %s: %v", pod.Name, node, err)
	}
}

// setPhase writes a pod's status phase (and reason), as the kubelet would.
func (h *harness) setPhase(ns, name string, phase corev1.PodPhase, reason string) {
	h.t.Helper()
	pod := &corev1.Pod{}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		h.t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	pod.Status.Phase = phase
	pod.Status.Reason = reason
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		h.t.Fatalf("set phase of %s/%s: %v", ns, name, err)
	}
}

// deletePod deletes a pod at once (no kubelet runs to finish a graceful deletion).
func (h *harness) deletePod(pod *corev1.Pod) {
	h.t.Helper()
	if err := h.c.Delete(h.ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		h.t.Fatalf("delete pod %s: %v", pod.Name, err)
	}
}

// attachments lists the S3PAs of node from the API server.
func (h *harness) attachments(node string) []s3csiv2.MountpointS3PodAttachment {
	h.t.Helper()
	list := &s3csiv2.MountpointS3PodAttachmentList{}
	if err := h.c.List(h.ctx, list); err != nil {
		h.t.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(a s3csiv2.MountpointS3PodAttachment) bool { return a.Spec.NodeName != node })
}

// mountpointPods lists the test's Mountpoint Pods from the API server.
func (h *harness) mountpointPods() []corev1.Pod {
	h.t.Helper()
	list := &corev1.PodList{}
	if err := h.c.List(h.ctx, list, client.InNamespace(h.cfg.MountpointNamespace)); err != nil {
		h.t.Fatal(err)
	}
	return list.Items
}

// eventually retries check until it returns nil or 20 s pass.
func (h *harness) eventually(what string, check func() error) {
	h.t.Helper()
	h.eventuallyWithin(20*time.Second, what, check)
}

// eventuallyWithin retries check until it returns nil or d passes.
func (h *harness) eventuallyWithin(d time.Duration, what string, check func() error) {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// consistently fails the test if check returns an error during d.
func (h *harness) consistently(what string, d time.Duration, check func() error) {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			h.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// uids returns the workload UIDs an attachment records, sorted.
func uids(a *s3csiv2.MountpointS3PodAttachment) []string {
	var out []string
	for _, ws := range a.Spec.MountpointS3PodAttachments {
		for _, w := range ws {
			out = append(out, w.WorkloadPodUID)
		}
	}
	slices.Sort(out)
	return out
}

func uidsOf(pods ...*corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, string(p.UID))
	}
	slices.Sort(out)
	return out
}

// busEvents returns the events of type t about node stored in the stream, nil when the stream
// cannot be read (NATS reconnecting): callers poll it with eventually.
func (h *harness) busEvents(t events.Type, node string) []*events.Decoded {
	h.t.Helper()
	var out []*events.Decoded
	err := events.Replay(h.ctx, h.js, events.ReplayOptions{Types: []events.Type{t}, Node: node},
		func(d *events.Decoded, _ *jetstream.MsgMetadata) error {
			out = append(out, d)
			return nil
		})
	if err != nil {
		h.t.Logf("replay events: %v", err)
		return nil
	}
	return out
}
