package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startServer runs srv until the test ends and returns its base URL. Start's result is checked
// in cleanup: it must return nil promptly after cancellation.
func startServer(t *testing.T, srv *Server) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start() = %v, want nil after cancel", err)
			}
		case <-time.After(ShutdownTimeout + time.Second):
			t.Errorf("Start() did not return after cancel")
		}
	})
	select {
	case <-srv.Listening():
	case err := <-done:
		t.Fatalf("Start() = %v before listening", err)
	case <-time.After(5 * time.Second):
		t.Fatal("server did not start listening")
	}
	return "http://" + srv.Addr()
}

// get fetches url without keep-alive, so no client connection goroutine outlives the test.
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

func passing(name string) Check {
	return Check{Name: name, Fn: func(context.Context) error { return nil }}
}

func failing(name string) Check {
	return Check{Name: name, Fn: func(context.Context) error { return errors.New("secret reason") }}
}

func TestProbes(t *testing.T) {
	tests := []struct {
		name       string
		health     []Check
		ready      []Check
		path       string
		wantStatus int
		wantBody   []string
		notInBody  []string
	}{
		{
			name: "healthz is ok with no checks", path: HealthzPath,
			wantStatus: http.StatusOK, wantBody: []string{"ok"},
		},
		{
			name: "healthz is ok when every check passes", path: HealthzPath,
			health:     []Check{passing("loop"), passing("bus")},
			wantStatus: http.StatusOK, wantBody: []string{"ok"},
		},
		{
			name: "healthz is unavailable and names the failing check", path: HealthzPath,
			health:     []Check{passing("loop"), failing("bus")},
			wantStatus: http.StatusServiceUnavailable, wantBody: []string{"[-]bus failed", "[+]loop ok"},
			notInBody: []string{"secret reason"},
		},
		{
			name: "healthz ignores readiness checks", path: HealthzPath,
			ready:      []Check{failing("cache-sync")},
			wantStatus: http.StatusOK, wantBody: []string{"ok"},
		},
		{
			name: "readyz is unavailable while a readiness check fails", path: ReadyzPath,
			ready:      []Check{failing("cache-sync")},
			wantStatus: http.StatusServiceUnavailable, wantBody: []string{"[-]cache-sync failed"},
		},
		{
			name: "readyz is unavailable while a liveness check fails", path: ReadyzPath,
			health: []Check{failing("loop")}, ready: []Check{passing("cache-sync")},
			wantStatus: http.StatusServiceUnavailable, wantBody: []string{"[-]loop failed", "[+]cache-sync ok"},
		},
		{
			name: "readyz is ok when every check passes", path: ReadyzPath,
			health: []Check{passing("loop")}, ready: []Check{passing("cache-sync")},
			wantStatus: http.StatusOK, wantBody: []string{"ok"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := New("127.0.0.1:0", prometheus.NewRegistry(), tt.health...)
			srv.AddReadyCheck(tt.ready...)
			base := startServer(t, srv)

			status, body := get(t, base+tt.path)
			if status != tt.wantStatus {
				t.Errorf("GET %s status = %d, want %d; body:\n%s", tt.path, status, tt.wantStatus, body)
			}
			for _, want := range tt.wantBody {
				if !strings.Contains(body, want) {
					t.Errorf("GET %s body = %q, want it to contain %q", tt.path, body, want)
				}
			}
			for _, unwanted := range tt.notInBody {
				if strings.Contains(body, unwanted) {
					t.Errorf("GET %s body = %q, must not contain %q", tt.path, body, unwanted)
				}
			}
		})
	}
}

func TestChecksAddedWhileRunningApply(t *testing.T) {
	srv := New("127.0.0.1:0", prometheus.NewRegistry())
	base := startServer(t, srv)
	if status, _ := get(t, base+ReadyzPath); status != http.StatusOK {
		t.Fatalf("GET readyz = %d before adding a check, want 200", status)
	}
	srv.AddReadyCheck(failing("informers"))
	if status, body := get(t, base+ReadyzPath); status != http.StatusServiceUnavailable || !strings.Contains(body, "informers") {
		t.Errorf("GET readyz = %d %q after adding a failing check, want 503 naming it", status, body)
	}
}

func TestMetricsServesRegisteredCollectors(t *testing.T) {
	reg := NewRegistry()
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "s3csi_test_total", Help: "Test counter."})
	reg.MustRegister(counter)
	counter.Add(3)

	base := startServer(t, New("127.0.0.1:0", reg))
	status, body := get(t, base+MetricsPath)
	if status != http.StatusOK {
		t.Fatalf("GET metrics status = %d, want 200", status)
	}
	for _, want := range []string{"s3csi_test_total 3", "go_goroutines", "process_start_time_seconds"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics do not contain %q", want)
		}
	}
}

// Every Kubernetes client in the process is counted on /metrics (rest_client_requests_total), so
// an operator sees each service's API request rate.
func TestMetricsCountTheKubernetesClientsRequests(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"major":"1","minor":"34","gitVersion":"v1.34.4"}`)
	}))
	defer api.Close()
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{
		Host: api.URL, Transport: &http.Transport{DisableKeepAlives: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.ServerVersion(); err != nil {
		t.Fatalf("GET /version: %v", err)
	}

	base := startServer(t, New("127.0.0.1:0", NewRegistry()))
	_, body := get(t, base+MetricsPath)
	want := fmt.Sprintf(`rest_client_requests_total{code="200",host=%q,method="GET"}`, strings.TrimPrefix(api.URL, "http://"))
	if !strings.Contains(body, want) {
		t.Errorf("metrics do not contain %s:\n%s", want, body)
	}
}

func TestStartReturnsListenError(t *testing.T) {
	first := New("127.0.0.1:0", prometheus.NewRegistry())
	startServer(t, first)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := New(first.Addr(), prometheus.NewRegistry()).Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "listen on admin address") {
		t.Errorf("Start() on a taken address = %v, want a listen error", err)
	}
}

func TestStartReturnsAfterCancelWithRequestInFlight(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	slow := Check{Name: "slow", Fn: func(context.Context) error {
		close(started)
		<-release
		return nil
	}}
	srv := New("127.0.0.1:0", prometheus.NewRegistry(), slow)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	<-srv.Listening()

	type result struct {
		status int
		err    error
	}
	got := make(chan result, 1)
	go func() {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Get("http://" + srv.Addr() + HealthzPath)
		if err != nil {
			got <- result{err: err}
			return
		}
		_ = resp.Body.Close()
		got <- result{status: resp.StatusCode}
	}()
	<-started
	cancel()
	// The in-flight probe finishes during the graceful shutdown.
	close(release)

	if err := <-done; err != nil {
		t.Errorf("Start() = %v, want nil", err)
	}
	if r := <-got; r.err != nil || r.status != http.StatusOK {
		t.Errorf("in-flight probe = %d, %v; want 200", r.status, r.err)
	}
}

func TestNewRejectsInvalidChecks(t *testing.T) {
	tests := []struct {
		name  string
		check Check
	}{
		{name: "a check without a name panics", check: Check{Fn: func(context.Context) error { return nil }}},
		{name: "a check without a function panics", check: Check{Name: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("New() did not panic")
				}
			}()
			New(":0", prometheus.NewRegistry(), tt.check)
		})
	}
}

func TestValidateAddr(t *testing.T) {
	tests := []struct {
		name    string
		addr    string
		wantErr bool
	}{
		{name: "a port on every interface is valid", addr: ":8081"},
		{name: "a host and a free port is valid", addr: "127.0.0.1:0"},
		{name: "an IPv6 host is valid", addr: "[::1]:9000"},
		{name: "a missing port is rejected", addr: "127.0.0.1", wantErr: true},
		{name: "a named port is rejected", addr: "localhost:http", wantErr: true},
		{name: "a port out of range is rejected", addr: ":65536", wantErr: true},
		{name: "an empty address is rejected", addr: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ValidateAddr(tt.addr); (err != nil) != tt.wantErr {
				t.Errorf("ValidateAddr(%q) = %v, want error %v", tt.addr, err, tt.wantErr)
			}
		})
	}
}
