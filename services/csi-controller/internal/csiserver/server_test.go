package csiserver_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sharedcsi "github.com/s3csi/s3csi/shared/csiserver"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/csi-controller/internal/controller"
	"github.com/s3csi/s3csi/services/csi-controller/internal/csiserver"
	"github.com/s3csi/s3csi/services/csi-controller/internal/metrics"
	"github.com/s3csi/s3csi/services/csi-controller/internal/proof"
	"github.com/s3csi/s3csi/services/csi-controller/internal/s3client"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Ginkgo's signal handler and output interceptor live for the whole process.
		goleak.IgnoreTopFunction("os/signal.signal_recv"),
		goleak.IgnoreAnyFunction("github.com/onsi/ginkgo/v2/internal.(*Suite).runNode.func1"),
		goleak.IgnoreAnyFunction("github.com/onsi/ginkgo/v2/internal/interrupt_handler.(*InterruptHandler).registerForInterrupts.func2"),
		// csi-sanity keeps its client connection for the process, by design.
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*controlBuffer).get"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*http2Client).reader"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/transport.(*http2Client).keepalive"),
	)
}

// harness is a running Server backed by versitygw.
type harness struct {
	server *sharedcsi.Server
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func startServer(t *testing.T, srv *testenv.S3, endpoint string, log logr.Logger) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	ep := s3client.Endpoint{URL: srv.Endpoint, Region: srv.Region, PathStyle: true}
	hc, err := s3client.NewHTTPClient(ep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hc.CloseIdleConnections)
	ctrl, err := controller.New(controller.Config{
		Endpoint: ep, HTTPClient: hc, CredentialsCacheTTL: time.Minute, BucketPrefix: "sanity-", Metrics: m,
		DriverCredentials: func() (s3client.Credentials, error) {
			return s3client.Credentials{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}, nil
		},
		OwnershipKeys: testKeys(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	s := csiserver.New(endpoint, csiserver.NewIdentity("v-test"), ctrl, m, log)
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{server: s, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- s.Start(ctx) }()
	select {
	case <-s.Listening():
	case err := <-h.done:
		cancel()
		t.Fatalf("Start() = %v before listening", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("the server did not listen within 10s")
	}
	return h
}

func (h *harness) stop(t *testing.T) {
	t.Helper()
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Start() = %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the server did not stop within 10s")
	}
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestServerServesLogsWithoutSecretsAndCountsRPCs(t *testing.T) {
	srv := testenv.StartS3(t)
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{Verbosity: 4})
	socket := filepath.Join(t.TempDir(), "csi.sock")
	h := startServer(t, srv, "unix://"+socket, log)
	conn := dial(t, socket)

	info, err := csi.NewIdentityClient(conn).GetPluginInfo(t.Context(), &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != "s3.csi.scality.com" || info.GetVendorVersion() != "v-test" {
		t.Errorf("GetPluginInfo() = %v, %v", info, err)
	}
	if err := h.server.Ready(t.Context()); err != nil {
		t.Errorf("Ready() while serving = %v", err)
	}
	ctrl := csi.NewControllerClient(conn)
	_, err = ctrl.CreateVolume(t.Context(), &csi.CreateVolumeRequest{
		Name:    "pvc-logged",
		Secrets: map[string]string{"access_key_id": srv.AccessKey, "secret_access_key": "TOPSECRETVALUE"},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
	})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("CreateVolume() with a wrong secret = %v, want Unauthenticated", err)
	}
	if strings.Contains(status.Convert(err).Message(), "TOPSECRETVALUE") {
		t.Errorf("CreateVolume() returned the secret in its error: %v", err)
	}
	if _, err := ctrl.ControllerPublishVolume(t.Context(), &csi.ControllerPublishVolumeRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("ControllerPublishVolume() = %v, want Unimplemented", err)
	}
	h.stop(t)

	mu.Lock()
	all := strings.Join(lines, "\n")
	mu.Unlock()
	if strings.Contains(all, "TOPSECRETVALUE") {
		t.Errorf("a secret reached the logs:\n%s", all)
	}
	if !strings.Contains(all, csiserver.Redacted) || !strings.Contains(all, "pvc-logged") {
		t.Errorf("the request was not logged sanitized:\n%s", all)
	}
	if got := testutil.ToFloat64(counter(t, h.reg, "CreateVolume", "Unauthenticated")); got != 1 {
		t.Errorf("csi_rpcs_total{CreateVolume,Unauthenticated} = %v, want 1", got)
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("the socket outlived the server: %v", err)
	}
}

func TestServerReplacesAStaleSocketButNotAFile(t *testing.T) {
	srv := testenv.StartS3(t)
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	// Closing a unix listener removes its file; unlink-on-close is off, as after a crash.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()
	h := startServer(t, srv, "unix://"+stale, testr.New(t))
	h.stop(t)

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctrl, err := controller.New(controller.Config{Metrics: metrics.New(prometheus.NewRegistry()), OwnershipKeys: testKeys(t)})
	if err != nil {
		t.Fatal(err)
	}
	s := csiserver.New("unix://"+file, csiserver.NewIdentity("v"), ctrl, metrics.New(prometheus.NewRegistry()), testr.New(t))
	if err := s.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Start() on a regular file = %v, want a refusal", err)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, method, code string) prometheus.Collector {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "s3csi_controller_csi_rpcs_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if strings.HasSuffix(labels["method"], "/"+method) && labels["code"] == code {
				return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x"}, func() float64 { return m.GetCounter().GetValue() })
			}
		}
	}
	t.Fatalf("no csi_rpcs_total{method=%s, code=%s}", method, code)
	return nil
}

func testKeys(t *testing.T) *proof.Keys {
	t.Helper()
	k, err := proof.NewKeys([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}
