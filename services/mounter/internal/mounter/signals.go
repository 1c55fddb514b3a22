package mounter

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// NotifySignals turns the process's SIGTERM and SIGINT into Run's two stop requests: the first
// signal closes the returned channel (kubelet's SIGTERM when the Mountpoint Pod is deleted or
// evicted), a second one cancels the returned context, with the signal as its cause. release
// stops the notification and cancels the context.
func NotifySignals(ctx context.Context) (_ context.Context, stopRequested <-chan struct{}, release func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	requested := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			close(requested)
		case <-ctx.Done():
			return
		}
		select {
		case sig := <-sigs:
			cancel(fmt.Errorf("a second stop signal (%v)", sig))
		case <-ctx.Done():
		}
	}()
	return ctx, requested, func() {
		signal.Stop(sigs)
		cancel(nil)
	}
}
