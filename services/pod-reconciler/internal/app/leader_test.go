package app

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	"github.com/s3csi/s3csi/shared/testenv"
)

func TestOneReplicaLeadsAndHandsOverOnShutdown(t *testing.T) {
	api := testenv.StartAPIServer(t)
	type replica struct {
		svc    *service
		cancel context.CancelFunc
		done   chan error
	}
	start := func() *replica {
		ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
		svc, err := newService(ctx, testOptions(t, api))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		r := &replica{svc: svc, cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- svc.run(ctx) }()
		return r
	}
	stop := func(r *replica) {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("run() = %v after cancel", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("run() did not return within 20s of cancel")
		}
	}
	a, b := start(), start()
	var leader, standby *replica
	select {
	case <-a.svc.mgr.Elected():
		leader, standby = a, b
	case <-b.svc.mgr.Elected():
		leader, standby = b, a
	case <-time.After(30 * time.Second):
		stop(a)
		stop(b)
		t.Fatal("no replica was elected within 30s")
	}
	defer stop(standby)
	select {
	case <-standby.svc.mgr.Elected():
		t.Error("both replicas lead")
	case <-time.After(2 * time.Second):
	}
	stop(leader)
	select {
	case <-standby.svc.mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Error("the standby did not take over within 30s of the leader's shutdown")
	}
}
