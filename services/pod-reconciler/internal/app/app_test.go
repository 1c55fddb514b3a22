package app

import (
	"context"
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
	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/options"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// client-go's and klog's process-wide background goroutines, started once per process.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"),
	)
}

// testOptions points the service at api with leader election in the default namespace.
func testOptions(t *testing.T, api *testenv.APIServer) *options.Options {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_URL", "")
	t.Setenv("MOUNTPOINT_NAMESPACE", "")
	opts := options.New()
	opts.AdminAddr = "127.0.0.1:0"
	opts.Kubeconfig = kubeconfig
	opts.LeaderElectionNamespace = "default"
	return opts
}

func TestRunReconcilesAndServesAdminEndpointsUntilCanceled(t *testing.T) {
	api := testenv.StartAPIServer(t)
	nats := testenv.StartNATS(t)
	opts := testOptions(t, api)
	opts.NATSURL = nats.URL()
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	defer cancel()
	svc, err := newService(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.run(ctx) }()

	select {
	case <-svc.admin.Listening():
	case err := <-done:
		t.Fatalf("run() = %v before the admin server listened", err)
	case <-time.After(10 * time.Second):
		t.Fatal("admin server did not listen within 10s")
	}
	base := "http://" + svc.admin.Addr()
	if status, body := get(t, base+"/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz = %d %q, want 200", status, body)
	}
	waitFor(t, "ready", func() error {
		if status, body := get(t, base+"/readyz"); status != http.StatusOK {
			return fmt.Errorf("GET /readyz = %d %q", status, body)
		}
		return nil
	})

	// A workload through the whole service: the leader records it in an attachment.
	c := api.Client
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mount-s3"}},
		fixture.PV("pv-app", fixture.PreBoundTo("default", "data")),
		fixture.PVC("data", fixture.WithVolumeName("pv-app")),
		fixture.Pod("app", fixture.WithClaim("vol", "data"), fixture.OnNode("node-app")),
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("create %s: %v", obj.GetName(), err)
		}
	}
	waitFor(t, "the workload is attached", func() error {
		list := &s3csiv2.MountpointS3PodAttachmentList{}
		if err := c.List(ctx, list); err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d attachments", len(list.Items))
		}
		return nil
	})
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: leaderElectionID}, lease); err != nil {
		t.Errorf("leader-election Lease: %v", err)
	}
	_, body := get(t, base+"/metrics")
	for _, want := range []string{"go_goroutines", "s3csi_pod_reconciler_workloads_assigned_total 1", "controller_runtime_reconcile_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run() = %v after cancel, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run() did not return within 20s of cancel")
	}
}

func TestRunFailsWhenTheAdminAddressIsTaken(t *testing.T) {
	api := testenv.StartAPIServer(t)
	var lc net.ListenConfig
	taken, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer taken.Close()

	opts := testOptions(t, api)
	opts.AdminAddr = taken.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Run(ctx, opts); err == nil || !strings.Contains(err.Error(), "listen on admin address") {
		t.Errorf("Run() = %v, want the listen error", err)
	}
}

func TestRunFailsWithoutAKubernetesConfiguration(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	opts := options.New()
	opts.AdminAddr = "127.0.0.1:0"
	if err := Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "Kubernetes client configuration") {
		t.Errorf("Run() = %v, want the configuration error", err)
	}
}

func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
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
