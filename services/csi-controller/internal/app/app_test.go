package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"go.uber.org/goleak"

	"github.com/s3csi/s3csi/services/csi-controller/internal/options"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testOptions() *options.Options {
	opts := options.New()
	opts.AdminAddr = "127.0.0.1:0"
	return opts
}

func TestRunServesAdminEndpointsUntilCanceled(t *testing.T) {
	svc := newService(testOptions())
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	defer cancel()
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
	if status, body := get(t, base+"/metrics"); status != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET /metrics = %d, want 200 with go_goroutines", status)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run() = %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run() did not return within 5s of cancel")
	}
}

func TestRunFailsWhenTheAdminAddressIsTaken(t *testing.T) {
	var lc net.ListenConfig
	taken, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer taken.Close()

	opts := testOptions()
	opts.AdminAddr = taken.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Run(ctx, opts); err == nil || !strings.Contains(err.Error(), "listen on admin address") {
		t.Errorf("Run() = %v, want the listen error", err)
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
