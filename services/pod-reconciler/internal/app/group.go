package app

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// runAll runs each start function until ctx is canceled or one of them fails, which cancels
// the others; it returns once all have returned, with the first error.
func runAll(ctx context.Context, starts ...func(context.Context) error) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, start := range starts {
		g.Go(func() error { return start(ctx) })
	}
	return g.Wait()
}
