package servicecmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// APIServerWait is how long a service waits at start for the API server to answer. The chart's
// liveness probe gives a container 60 s before its admin server must answer.
const APIServerWait = 45 * time.Second

// WaitForAPIServer returns once the API server of cfg answers /version, retrying with a backoff
// from 250 ms to 5 s, or fails when wait passes or ctx ends first.
//
// Problem: a service that starts while the API server is away (restarted by a control-plane
// upgrade, or the leader-election loss that the outage itself caused) failed its first request
// and exited; kubelet's crash-loop back-off then kept it down for up to minutes after the API
// server was back, and mounts waited for it.
// Solution: wait for the API server before anything else talks to it, logging once, for a bound
// the liveness probe allows.
// Invariant: a service starts at most about 5 s after the API server answers again, provided
// that is within wait.
func WaitForAPIServer(ctx context.Context, cfg *rest.Config, wait time.Duration) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create discovery client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	backoff := 250 * time.Millisecond
	logged := false
	for {
		err := dc.RESTClient().Get().AbsPath("/version").Do(ctx).Error()
		if err == nil {
			if logged {
				logr.FromContextOrDiscard(ctx).Info("The API server answers")
			}
			return nil
		}
		if !logged {
			logr.FromContextOrDiscard(ctx).Info("Waiting for the API server", "host", cfg.Host, "error", err.Error())
			logged = true
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("the API server at %s did not answer within %s: %w", cfg.Host, wait, err)
			}
			return fmt.Errorf("wait for the API server at %s: %w", cfg.Host, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
