package servicecmd

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestWaitForAPIServerWaitsUntilItAnswers(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 3 || r.URL.Path != "/version" {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"major":"1","minor":"34","gitVersion":"v1.34.4"}`))
	}))
	defer srv.Close()
	if err := WaitForAPIServer(context.Background(), &rest.Config{Host: srv.URL}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("%d requests, want 4 (three refused, one answered)", n)
	}
}

func TestWaitForAPIServerGivesUpAfterItsBound(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	srv.Close() // nothing listens: connection refused, as while the API server restarts
	start := time.Now()
	err := WaitForAPIServer(context.Background(), &rest.Config{Host: srv.URL}, time.Second)
	if err == nil || !strings.Contains(err.Error(), "did not answer within 1s") {
		t.Fatalf("err = %v, want one saying it did not answer within 1s", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("gave up after %s, want about 1s", took)
	}
}
