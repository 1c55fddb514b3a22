// Package admin serves the operational HTTP endpoint every s3csi service runs: /healthz for the
// kubelet's liveness probe, /readyz for its readiness probe and /metrics for Prometheus.
//
// It is deliberately separate from any service traffic (CSI gRPC, webhooks) so that a probe or a
// scrape keeps working while the service's own listeners are busy or not yet up.
package admin

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Paths served by Server.
const (
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
	MetricsPath = "/metrics"
)

const (
	// ShutdownTimeout bounds the graceful shutdown once the context is canceled. It is short
	// because the admin endpoint only serves probes and scrapes, and the pod's termination grace
	// period must be left to the service's real work (unmounts, releasing the lease).
	ShutdownTimeout = 3 * time.Second

	// CheckTimeout bounds each check. The kubelet's default probe timeout is 1s, so a slower check
	// would fail the probe anyway; the deadline only stops a stuck check from piling up.
	CheckTimeout = 2 * time.Second

	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	// writeTimeout leaves room for a large /metrics response to a slow scraper.
	writeTimeout = 30 * time.Second
	idleTimeout  = 60 * time.Second
)

// Check is one named health or readiness condition.
type Check struct {
	// Name identifies the check in the probe response and the logs, e.g. "informer-sync".
	Name string
	// Fn returns nil when the condition holds. It must be cheap and honor ctx: it runs on every
	// probe, under CheckTimeout.
	Fn func(ctx context.Context) error
}

// Server is the admin HTTP endpoint. Create it with New, add checks, then run Start once.
type Server struct {
	addr    string
	handler http.Handler

	mu           sync.Mutex
	healthChecks []Check
	readyChecks  []Check
	boundAddr    string

	listening chan struct{}
}

// New returns a Server that will listen on addr (host:port; port 0 picks a free port, see Addr)
// and expose the metrics gathered by reg, with controller-runtime's registry beside them (the
// Kubernetes client's request counts). checks are liveness checks served on /healthz.
//
// It panics when a check has no name or no function: that is a programming error, caught at
// startup rather than on the first probe.
func New(addr string, reg prometheus.Gatherer, checks ...Check) *Server {
	s := &Server{addr: addr, listening: make(chan struct{})}
	s.AddHealthCheck(checks...)

	mux := http.NewServeMux()
	mux.HandleFunc(HealthzPath, s.serveChecks(func() []Check { return s.checks(false) }))
	mux.HandleFunc(ReadyzPath, s.serveChecks(func() []Check { return s.checks(true) }))
	// controller-runtime's registry holds the Kubernetes client's request counts
	// (rest_client_requests_total, every client in the process) and, where a manager runs, its
	// workqueue, reconcile and leader-election metrics.
	mux.Handle(MetricsPath, promhttp.HandlerFor(prometheus.Gatherers{reg, ctrlmetrics.Registry}, promhttp.HandlerOpts{
		// A collector that fails should cost one series, not the whole scrape.
		ErrorHandling: promhttp.ContinueOnError,
	}))
	s.handler = mux
	return s
}

// NewRegistry returns a registry holding the Go runtime and process collectors, the baseline
// every service exposes. Services register their own metrics on it.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// ValidateAddr reports whether addr is a host:port that Start can listen on (numeric port, 0 for
// any free port), so that a typo in a flag fails at validation with the flag's name rather than
// at startup.
func ValidateAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("parse address %q: %w", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("parse address %q: port must be a number from 0 to 65535", addr)
	}
	return nil
}

// AddHealthCheck adds liveness checks to /healthz. A failing liveness check gets the container
// restarted, so only add conditions that a restart can fix (a wedged loop, not an unreachable
// API server). Safe to call while the server runs.
func (s *Server) AddHealthCheck(checks ...Check) {
	mustBeValid(checks)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.healthChecks = append(s.healthChecks, checks...)
}

// AddReadyCheck adds readiness checks to /readyz, e.g. "caches synced". Safe to call while the
// server runs, so a component can register its check when it starts.
func (s *Server) AddReadyCheck(checks ...Check) {
	mustBeValid(checks)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readyChecks = append(s.readyChecks, checks...)
}

// Addr returns the address the server is bound to, or "" before it listens. Wait on Listening
// first when the configured port is 0.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boundAddr
}

// Listening returns a channel closed once the server accepts connections.
func (s *Server) Listening() <-chan struct{} {
	return s.listening
}

// Start listens, serves until ctx is done, then shuts down gracefully within ShutdownTimeout.
// It returns nil after a clean shutdown and an error when it cannot listen or serve. It logs
// through the logr.Logger in ctx. Call it once.
func (s *Server) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("admin")

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen on admin address %q: %w", s.addr, err)
	}

	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		// Requests keep ctx's values (the logger) but not its cancellation, so in-flight probes
		// finish during the graceful shutdown instead of failing at once.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:    stdlog.New(logWriter{log}, "", 0),
	}

	s.mu.Lock()
	s.boundAddr = ln.Addr().String()
	s.mu.Unlock()
	close(s.listening)
	log.Info("Serving admin endpoints", "address", ln.Addr().String())

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		// Serve only returns early on an accept failure; it has already closed the listener.
		return fmt.Errorf("serve admin endpoints: %w", err)
	case <-ctx.Done():
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	shutdownErr := srv.Shutdown(shutdownCtx)
	if shutdownErr != nil {
		// Graceful shutdown timed out: drop the remaining connections so no goroutine outlives Start.
		shutdownErr = errors.Join(shutdownErr, srv.Close())
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve admin endpoints: %w", err)
	}
	if shutdownErr != nil {
		return fmt.Errorf("shut down admin endpoints: %w", shutdownErr)
	}
	log.Info("Stopped admin endpoints")
	return nil
}

func (s *Server) checks(ready bool) []Check {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A process that is not alive is not ready either, so /readyz runs the liveness checks too.
	if ready {
		return append(append([]Check(nil), s.healthChecks...), s.readyChecks...)
	}
	return append([]Check(nil), s.healthChecks...)
}

// serveChecks runs every check and answers 200 "ok", or 503 listing each check as [+]name or
// [-]name. Like the Kubernetes API server, it keeps failure reasons out of the unauthenticated
// response and logs them instead.
func (s *Server) serveChecks(checks func() []Check) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		log := logr.FromContextOrDiscard(r.Context()).WithName("admin")
		var body []byte
		failed := false
		for _, c := range checks() {
			if err := runCheck(r.Context(), c); err != nil {
				failed = true
				log.Info("Check failed", "path", r.URL.Path, "check", c.Name, "err", err.Error())
				body = fmt.Appendf(body, "[-]%s failed\n", c.Name)
				continue
			}
			body = fmt.Appendf(body, "[+]%s ok\n", c.Name)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
			body = fmt.Appendf(body, "%s check failed\n", r.URL.Path)
		} else {
			body = []byte("ok")
		}
		_, _ = w.Write(body) // The client went away; nothing to do.
	}
}

func runCheck(ctx context.Context, c Check) error {
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	return c.Fn(ctx)
}

func mustBeValid(checks []Check) {
	for i, c := range checks {
		if c.Name == "" || c.Fn == nil {
			panic(fmt.Sprintf("admin: check %d (%q) needs both a name and a function", i, c.Name))
		}
	}
}

// logWriter routes net/http's internal errors (bad requests, accept retries) into the service
// logger, so they share its format.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info("HTTP server error", "detail", strings.TrimSpace(string(p)))
	return len(p), nil
}
