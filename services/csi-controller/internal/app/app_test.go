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

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/csi-controller/internal/options"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testOptions points the service at an S3 endpoint and a socket of the test; the driver's
// credentials come from the environment, as in a Deployment.
func testOptions(t *testing.T, endpoint string) *options.Options {
	opts := options.New()
	opts.AdminAddr = "127.0.0.1:0"
	opts.CSIEndpoint = "unix://" + filepath.Join(t.TempDir(), "csi.sock")
	opts.S3Endpoint = endpoint
	opts.NATSURL = ""
	opts.OwnershipKeysDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(opts.OwnershipKeysDir, "key"), []byte(strings.Repeat("k", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	return opts
}

// running is a service started by start; stop cancels it and checks it returned nil.
type running struct {
	svc    *service
	base   string
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, opts *options.Options) *running {
	t.Helper()
	svc, err := newService(t.Context(), opts, testr.New(t))
	if err != nil {
		t.Fatalf("newService() = %v", err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	r := &running{svc: svc, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- svc.run(ctx) }()
	for _, ch := range []<-chan struct{}{svc.admin.Listening(), svc.csi.Listening()} {
		select {
		case <-ch:
		case err := <-r.done:
			cancel()
			t.Fatalf("run() = %v before listening", err)
		case <-time.After(5 * time.Second):
			cancel()
			t.Fatal("the service did not listen within 5s")
		}
	}
	r.base = "http://" + svc.admin.Addr()
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("run() = %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run() did not return within 10s of cancel")
	}
}

func TestRunServesCSIAndPublishesEventsUntilCanceled(t *testing.T) {
	s3 := testenv.StartS3(t)
	bus := testenv.StartNATS(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	opts := testOptions(t, s3.Endpoint)
	opts.NATSURL = bus.URL()
	r := start(t, opts)

	if status, body := get(t, r.base+"/readyz"); status != http.StatusOK {
		t.Errorf("GET /readyz = %d %q, want 200", status, body)
	}
	conn, err := grpc.NewClient(opts.CSIEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := csi.NewControllerClient(conn).CreateVolume(t.Context(), &csi.CreateVolumeRequest{
		Name: "pvc-app",
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
	})
	_ = conn.Close()
	if err != nil {
		t.Fatalf("CreateVolume() = %v", err)
	}
	if !strings.HasPrefix(resp.GetVolume().GetVolumeId(), options.DefaultBucketPrefix) {
		t.Errorf("volume ID = %q, want the default prefix", resp.GetVolume().GetVolumeId())
	}
	waitForEvent(t, bus.URL(), events.TypeVolumeCreated)

	_, body := get(t, r.base+"/metrics")
	for _, want := range []string{`s3csi_controller_csi_rpcs_total{code="OK",method="/csi.v1.Controller/CreateVolume"} 1`, "s3csi_controller_s3_requests_total", "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
	r.stop(t)
}

func TestReadinessReflectsTheS3Endpoint(t *testing.T) {
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	_ = l.Close()
	r := start(t, testOptions(t, closed))
	if status, body := get(t, r.base+"/readyz"); status == http.StatusOK || !strings.Contains(body, "s3-endpoint") {
		t.Errorf("GET /readyz with S3 down = %d %q, want a failure naming s3-endpoint", status, body)
	}
	if status, _ := get(t, r.base+"/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz with S3 down = %d, want 200: a restart cannot fix S3", status)
	}
	r.stop(t)
}

func TestRunFailsWhenTheAdminAddressIsTaken(t *testing.T) {
	var lc net.ListenConfig
	taken, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer taken.Close()

	opts := testOptions(t, "http://127.0.0.1:1")
	opts.AdminAddr = taken.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Run(ctx, opts); err == nil || !strings.Contains(err.Error(), "listen on admin address") {
		t.Errorf("Run() = %v, want the listen error", err)
	}
}

func TestRunFailsOnAMissingCABundle(t *testing.T) {
	opts := testOptions(t, "https://127.0.0.1:1")
	opts.S3CABundle = filepath.Join(t.TempDir(), "missing.pem")
	if err := Run(t.Context(), opts); err == nil || !strings.Contains(err.Error(), "CA bundle") {
		t.Errorf("Run() = %v, want the CA bundle error", err)
	}
}

// waitForEvent waits until the event stream holds an event of type want.
func waitForEvent(t *testing.T, url string, want events.Type) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s, err := js.Stream(t.Context(), events.StreamName); err == nil {
			if msg, err := s.GetLastMsgForSubject(t.Context(), want.Stem()); err == nil {
				if d, err := events.Decode(msg.Data); err == nil && d.Type == want {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s event within 10s", want)
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
