package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/metrics"
)

// Watchdog tells whether the controllers still make progress, for the liveness probe.
//
// Problem: a wedged reconciler (a deadlock, a call that never returns) looks healthy from the
// outside while workloads wait forever for their Mountpoint Pod; an idle one must not be
// restarted just because nothing happened.
// Solution: every controller's work queue and every reconcile report to the Watchdog. Progress
// is a finished reconcile, or work arriving while nothing was pending.
// Invariant: Check fails only when work is pending (queued or in flight) and no progress was
// made for the stall timeout.
type Watchdog struct {
	now func() time.Time

	mu     sync.Mutex
	queues []queueLen

	inflight     atomic.Int64
	lastProgress atomic.Int64 // unix nanoseconds
}

type queueLen interface{ Len() int }

func newWatchdog() *Watchdog {
	w := &Watchdog{now: time.Now}
	w.progress()
	return w
}

func (w *Watchdog) progress() { w.lastProgress.Store(w.now().UnixNano()) }

func (w *Watchdog) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := int(w.inflight.Load())
	for _, q := range w.queues {
		n += q.Len()
	}
	return n
}

// Check returns a liveness check failing when work has been pending without progress for
// longer than stall.
func (w *Watchdog) Check(stall time.Duration) func(context.Context) error {
	return func(context.Context) error {
		pending := w.pending()
		if pending == 0 {
			w.progress()
			return nil
		}
		since := w.now().Sub(time.Unix(0, w.lastProgress.Load()))
		if since > stall {
			return fmt.Errorf("no reconcile finished for %s while %d requests are pending", since.Round(time.Second), pending)
		}
		return nil
	}
}

// newQueue is the controllers' NewQueue: the default rate-limited queue, reporting to w.
func (w *Watchdog) newQueue(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	q := &watchedQueue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(rl,
			workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Name: name}),
		w: w,
	}
	w.mu.Lock()
	w.queues = append(w.queues, q)
	w.mu.Unlock()
	return q
}

// watchedQueue marks progress when work arrives at an idle reconciler, so that idle time is
// never counted as a stall.
type watchedQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	w *Watchdog
}

func (q *watchedQueue) Add(item reconcile.Request) {
	if q.Len() == 0 && q.w.inflight.Load() == 0 {
		q.w.progress()
	}
	q.TypedRateLimitingInterface.Add(item)
}

// instrumented wraps a controller's reconciler with the metrics and the watchdog, and turns
// errRetry into a short requeue that is not counted as an error.
type instrumented struct {
	name  string
	inner reconcile.Reconciler
	m     *metrics.Metrics
	w     *Watchdog
}

func (i *instrumented) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	i.w.inflight.Add(1)
	defer func() {
		i.w.progress()
		i.w.inflight.Add(-1)
	}()
	res, err := i.inner.Reconcile(ctx, req)
	result := metrics.ResultSuccess
	switch {
	case errors.Is(err, errRetry):
		res, err = reconcile.Result{RequeueAfter: retryAfter}, nil
		result = metrics.ResultRequeue
	case err != nil:
		result = metrics.ResultError
		i.m.ReconcileErrorsTotal.WithLabelValues(i.name).Inc()
	case res.RequeueAfter > 0:
		result = metrics.ResultRequeue
	}
	i.m.ReconcilesTotal.WithLabelValues(i.name, result).Inc()
	return res, err
}
