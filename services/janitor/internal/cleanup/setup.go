package cleanup

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Setup builds the janitor on mgr: the cache indexes, the periodic sweep and the targeted
// checks, both leader-elected runnables of mgr. The returned Triggers' HandleEvent is the
// handler of the janitor's event consumer.
func Setup(ctx context.Context, mgr manager.Manager, cfg Config, notify Notifier, metrics *Metrics,
	log logr.Logger) (*Janitor, *Triggers, error) {
	if err := Indexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, nil, err
	}
	j := New(cfg, mgr.GetCache(), mgr.GetAPIReader(), mgr.GetClient(), notify, metrics, log)
	t := NewTriggers(j, mgr.GetCache())
	for _, r := range []manager.Runnable{NewSweeper(j), t} {
		if err := mgr.Add(r); err != nil {
			return nil, nil, fmt.Errorf("add janitor runnable: %w", err)
		}
	}
	return j, t, nil
}
