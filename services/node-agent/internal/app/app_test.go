package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/node-agent/internal/options"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// client-go's and klog's process-wide background goroutines.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Type).updateUnfinishedWorkLoop"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/tools/cache.(*processorListener).run"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/tools/cache.(*processorListener).pop"),
		goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/log.(*loggerPromise).Fulfill"),
	)
}

// shortDir is a temporary dir short enough for unix socket paths (at most 107 bytes).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "na")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func testOptions(t *testing.T) *options.Options {
	opts := options.New()
	opts.AdminAddr = "127.0.0.1:0"
	opts.NodeName = "node-a"
	opts.NATSURL = ""
	opts.KubeletDir = shortDir(t)
	opts.CSIEndpoint = "unix://" + filepath.Join(shortDir(t), "csi.sock")
	return opts
}

func TestRunServesCSIAdminAndRegistrationUntilCanceled(t *testing.T) {
	api := testenv.StartAPIServer(t)
	natsSrv := testenv.StartNATS(t)
	opts := testOptions(t)
	opts.NATSURL = natsSrv.URL()
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	defer cancel()
	svc, err := newService(ctx, opts, api.Config)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.run(ctx) }()

	select {
	case <-svc.admin.Listening():
	case err := <-done:
		t.Fatalf("run() = %v before the admin server listened", err)
	case <-time.After(5 * time.Second):
		t.Fatal("admin server did not listen within 5s")
	}
	base := "http://" + svc.admin.Addr()
	if status, body := get(t, base+"/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz = %d %q, want 200", status, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, _ := get(t, base+"/readyz")
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz not OK within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status, body := get(t, base+"/metrics"); status != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET /metrics = %d, want 200 with go_goroutines", status)
	}

	conn, err := grpc.NewClient(opts.CSIEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	probe, err := csipb.NewIdentityClient(conn).Probe(ctx, &csipb.ProbeRequest{})
	if err != nil || !probe.GetReady().GetValue() {
		t.Errorf("Probe = %v, %v; want ready", probe, err)
	}
	_ = conn.Close()
	reg := filepath.Join(opts.KubeletDir, "plugins_registry", mppod.DriverName+"-reg.sock")
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := os.Stat(reg); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("registration socket %s not created", reg)
		}
		time.Sleep(20 * time.Millisecond)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run() = %v after cancel, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run() did not return within 15s of cancel")
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

	opts := testOptions(t)
	opts.AdminAddr = taken.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := newService(ctx, opts, api.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.run(ctx); err == nil || !strings.Contains(err.Error(), "listen on admin address") {
		t.Errorf("run() = %v, want the listen error", err)
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
