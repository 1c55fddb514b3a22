package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/janitor/internal/cleanup"
	"github.com/s3csi/s3csi/services/janitor/internal/options"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	goleak.VerifyTestMain(m,
		// controller-runtime wraps metadata watches in watch.Filter, whose loop blocks on a send
		// nobody receives once the informer stopped (apimachinery v0.34).
		goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop"))
}

// cluster is an API server with the Mountpoint namespace and a kubeconfig for the janitor.
type cluster struct {
	*testenv.APIServer
	kubeconfig string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	api := testenv.StartAPIServer(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.Kubeconfig(path); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mppod.DefaultNamespace}}
	if err := api.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("create Mountpoint namespace: %v", err)
	}
	return &cluster{APIServer: api, kubeconfig: path}
}

func testOptions(c *cluster) *options.Options {
	opts := options.New()
	opts.AdminAddr = "127.0.0.1:0"
	opts.NATSURL = ""
	opts.MountpointNamespace = mppod.DefaultNamespace
	opts.Kubeconfig = c.kubeconfig
	opts.LeaderElectionNamespace = "default"
	opts.SweepInterval = time.Second
	opts.StaleAfter = time.Second
	return opts
}

// running is a janitor service run by a test.
type running struct {
	svc    *service
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, opts *options.Options) *running {
	t.Helper()
	svc, err := newService(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	r := &running{svc: svc, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- svc.run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	select {
	case <-svc.admin.Listening():
	case err := <-r.done:
		r.done <- err
		t.Fatalf("run() = %v before the admin server listened", err)
	case <-time.After(10 * time.Second):
		t.Fatal("admin server did not listen within 10s")
	}
	return r
}

// stop cancels the service and checks that it returns nil promptly; it is idempotent.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("run() = %v after cancel, want nil", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(30 * time.Second):
		t.Error("run() did not return within 30s of cancel")
	}
}

func (r *running) sweeps() float64 {
	return testutil.ToFloat64(r.svc.metrics.Sweeps.WithLabelValues("success"))
}

func TestRunServesAdminEndpointsAndSweepsUntilCanceled(t *testing.T) {
	c := startCluster(t)
	r := start(t, testOptions(c))
	base := "http://" + r.svc.admin.Addr()

	if status, body := get(t, base+"/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz = %d %q, want 200", status, body)
	}
	eventually(t, "ready", func() error {
		if status, body := get(t, base+"/readyz"); status != http.StatusOK {
			return errors.New(body)
		}
		return nil
	})
	eventually(t, "a sweep", func() error {
		if r.sweeps() < 1 {
			return errors.New("no successful sweep yet")
		}
		return nil
	})
	if status, body := get(t, base+"/metrics"); status != http.StatusOK ||
		!strings.Contains(body, "s3csi_janitor_sweeps_total") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET /metrics = %d, want 200 with the janitor's and the runtime's metrics", status)
	}
	r.stop(t)
}

func TestRunFailsWhenTheAdminAddressIsTaken(t *testing.T) {
	c := startCluster(t)
	var lc net.ListenConfig
	taken, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer taken.Close()

	opts := testOptions(c)
	opts.AdminAddr = taken.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Run(ctx, opts); err == nil || !strings.Contains(err.Error(), "listen on admin address") {
		t.Errorf("Run() = %v, want the listen error", err)
	}
}

func TestOnlyTheLeaderSweeps(t *testing.T) {
	c := startCluster(t)
	opts := testOptions(c)
	leader := start(t, opts)
	eventually(t, "the first replica sweeps", func() error {
		if leader.sweeps() < 1 {
			return errors.New("no sweep")
		}
		return nil
	})
	standby := start(t, testOptions(c))
	time.Sleep(3 * opts.SweepInterval)
	if n := standby.sweeps(); n != 0 {
		t.Fatalf("the standby swept %v times while the leader held the Lease", n)
	}

	leader.stop(t) // releases the Lease on the way out
	eventually(t, "the standby takes over", func() error {
		if standby.sweeps() < 1 {
			return errors.New("no sweep")
		}
		return nil
	})
}

// staleAttachment creates an attachment whose only workload never existed, attached long ago.
// staleMountpointPod is the Mountpoint Pod name of staleAttachment(name): names in events must
// have the shape mppod.Name gives.
func staleMountpointPod(name string) string { return mppod.Name(goneUID(name), "pv-"+name) }

// goneUID is a UUID, as event payloads require, derived from name: the UID of a gone workload.
func goneUID(name string) string {
	h := sha256.Sum256([]byte(name))
	x := hex.EncodeToString(h[:16])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

func staleAttachment(t *testing.T, c client.Client, name, node string) *s3csiv2.MountpointS3PodAttachment {
	t.Helper()
	s3pa := &s3csiv2.MountpointS3PodAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: s3csiv2.MountpointS3PodAttachmentSpec{
			NodeName: node, PersistentVolumeName: "pv-" + name, VolumeID: "bucket-" + name,
			MountpointS3PodAttachments: map[string][]s3csiv2.WorkloadAttachment{
				staleMountpointPod(name): {{WorkloadPodUID: goneUID(name), AttachmentTime: metav1.NewTime(time.Now().Add(-time.Hour))}},
			},
		},
	}
	for _, o := range []client.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, s3pa} {
		if err := c.Create(t.Context(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
	return s3pa
}

func gone(t *testing.T, c client.Client, obj client.Object) func() error {
	return func() error {
		err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New(obj.GetName() + " still exists")
	}
}

func startNATS(t *testing.T) (*testenv.NATS, jetstream.JetStream) {
	t.Helper()
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("open JetStream: %v", err)
	}
	if _, err := events.EnsureStream(t.Context(), js, events.StreamConfig{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	return srv, js
}

// busEvents returns every event of type typ in the stream, with its subject.
func busEvents(t *testing.T, js jetstream.JetStream, typ events.Type) (subjects []string, decoded []*events.Decoded) {
	t.Helper()
	stream, err := js.Stream(t.Context(), events.StreamName)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := stream.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("get message %d: %v", seq, err)
		}
		d, err := events.Decode(msg.Data)
		if err != nil {
			t.Fatalf("decode message %d: %v", seq, err)
		}
		if d.Type == typ {
			subjects = append(subjects, msg.Subject)
			decoded = append(decoded, d)
		}
	}
	return subjects, decoded
}

func TestBusEventTriggersCleanupAndCleanedEventsCarryTheReason(t *testing.T) {
	c := startCluster(t)
	srv, js := startNATS(t)
	opts := testOptions(c)
	opts.NATSURL = srv.URL()
	opts.SweepInterval = time.Hour // only the first sweep runs: the event must do the rest
	r := start(t, opts)
	eventually(t, "the first sweep", func() error {
		if r.sweeps() < 1 {
			return errors.New("no sweep")
		}
		return nil
	})

	node := "node-a.example.com"
	mp := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: staleMountpointPod("s3pa-bus"), Namespace: mppod.DefaultNamespace,
			Labels: map[string]string{s3csiv2.LabelDriverVersion: "test"},
		},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "mountpoint", Image: "mounter:test"}}},
	}
	if err := c.Client.Create(t.Context(), mp); err != nil {
		t.Fatalf("create Mountpoint Pod: %v", err)
	}
	s3pa := staleAttachment(t, c.Client, "s3pa-bus", node)
	// Let the consumer exist before publishing: a new durable starts with new events.
	eventually(t, "consumer", func() error {
		_, err := js.Consumer(t.Context(), events.StreamName, ConsumerName)
		return err
	})
	e, err := events.New("/test", "", &eventspb.VolumeUnpublished{
		Node: node, VolumeId: s3pa.Spec.VolumeID, WorkloadPodUid: goneUID("s3pa-bus"), TargetPath: "/t",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewPublisher(js, events.PublisherOptions{}).Publish(t.Context(), e); err != nil {
		t.Fatalf("publish: %v", err)
	}
	eventually(t, "attachment removed after the event", gone(t, c.Client, s3pa))

	wantSubject := "s3csi.events.attachment.cleaned.node-a_example_com"
	eventually(t, "attachment.cleaned events on the bus", func() error {
		subjects, decoded := busEvents(t, js, events.TypeAttachmentCleaned)
		reasons := map[string]bool{}
		for i, d := range decoded {
			p := d.Payload.(*eventspb.AttachmentCleaned)
			if subjects[i] != wantSubject || p.GetAttachmentName() != s3pa.Name {
				return errors.New("event on " + subjects[i] + " about " + p.GetAttachmentName())
			}
			reasons[p.GetReason()] = true
		}
		if !reasons[cleanup.ReasonWorkloadGone] || !reasons[cleanup.ReasonEmptyAttachment] {
			return errors.New("missing reasons")
		}
		return nil
	})
	eventually(t, "mountpoint.needs-unmount event on the bus", func() error {
		subjects, decoded := busEvents(t, js, events.TypeMountpointNeedsUnmount)
		if len(decoded) != 1 || subjects[0] != "s3csi.events.mountpoint.needs-unmount.node-a_example_com" ||
			decoded[0].Payload.(*eventspb.MountpointNeedsUnmount).GetMountpointPodName() != mp.Name {
			return fmt.Errorf("events on %v = %v, want one for %s", subjects, decoded, mp.Name)
		}
		return nil
	})
	if err := c.Client.Get(t.Context(), client.ObjectKeyFromObject(mp), mp); err != nil ||
		mp.Annotations[mppod.AnnotationNeedsUnmount] != "true" {
		t.Errorf("Mountpoint Pod annotations = %v (%v), want needs-unmount", mp.Annotations, err)
	}
}

func TestJanitorConvergesWithNATSDown(t *testing.T) {
	c := startCluster(t)
	srv := testenv.StartNATS(t)
	srv.Stop()
	opts := testOptions(c)
	opts.NATSURL = srv.URL()
	r := start(t, opts)

	s3pa := staleAttachment(t, c.Client, "s3pa-nats-down", "node-b")
	eventually(t, "attachment removed by the sweep", gone(t, c.Client, s3pa))
	// The counter moves after the delete returns, which the test can see first.
	eventually(t, "removal counted", func() error {
		if n := testutil.ToFloat64(r.svc.metrics.Removed.WithLabelValues(cleanup.KindAttachment, cleanup.ReasonEmptyAttachment)); n != 1 {
			return fmt.Errorf("removed attachments metric = %v, want 1", n)
		}
		return nil
	})
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get fetches url without keep-alive, so no client goroutine outlives the test.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}
