package events_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/testenv"
)

// The chart's clustered NATS (`nats.replicas: 3`, stream R3) as three embedded servers: the
// server that leads the stream is stopped in the middle of a burst of publishes. Every event
// the stream acknowledged is still stored, once, on the two servers left; publishes go on
// through the new leader; and a durable consumer handles every event, including the ones
// published after the failover.
func TestR3StreamKeepsEveryAcknowledgedEventWhenAServerDies(t *testing.T) {
	const (
		node       = "node-a"
		burst      = 600
		publishers = 4
		killAfter  = burst / 3 // acknowledged events before the stream leader is stopped
	)
	cl := testenv.StartNATSCluster(t, 3)
	ctx := testContext(t, 3*time.Minute)
	nc, err := events.Connect(ctx, cl.URLs(), t.Name(), logr.Discard())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("create JetStream context: %v", err)
	}
	// The cluster elects its meta leader a moment after the servers start; until then a
	// replicated stream cannot be created.
	var stream jetstream.Stream
	eventually(t, 30*time.Second, "the R3 stream is created", func() bool {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		stream, err = events.EnsureStream(attempt, js, events.StreamConfig{Replicas: 3})
		if err != nil {
			t.Logf("ensure: %v", err)
		}
		return err == nil
	})
	b := &bus{nc: nc, js: js, pub: events.NewPublisher(js, events.PublisherOptions{MaxBackoff: 500 * time.Millisecond})}

	rec := newRecorder(nil)
	b.consume(t, events.ConsumerConfig{
		Durable: "node-a", FilterSubjects: events.NodeSubjects(node), AckWait: 2 * time.Second,
		Backoff: []time.Duration{100 * time.Millisecond},
	}, rec.handle)

	var (
		acked    sync.Map // event id -> stream sequence
		nAcked   atomic.Int64
		killed   = make(chan string, 1) // name of the stopped server
		failures = make(chan error, burst)
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	began := time.Now()
	for range publishers {
		wg.Go(func() {
			for next.Add(1) <= burst {
				e := mustNew(t, payload(events.TypeAttachmentAssigned, node))
				ack, err := b.pub.Publish(ctx, e)
				if err != nil {
					failures <- err
					continue
				}
				acked.Store(e.ID(), ack.Sequence)
				if nAcked.Add(1) == killAfter {
					name, err := stopStreamLeader(cl)
					if err != nil {
						failures <- err
					}
					killed <- name
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Errorf("publish during the failover: %v", err)
	}
	stopped := <-killed
	t.Logf("stopped %s, the stream leader, after %d acknowledged events; the burst of %d took %s",
		stopped, killAfter, burst, time.Since(began).Round(time.Millisecond))

	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatalf("read the stream after the failover: %v", err)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == stopped {
		t.Fatalf("the stream has no new leader after %s stopped: %+v", stopped, info.Cluster)
	}

	// Every acknowledged event is stored exactly once, read back from the servers left.
	stored := map[string]int{}
	err = events.ReadStream(ctx, js, events.ReadOptions{}, func(m events.StoredEvent) error {
		if m.Err != nil {
			return fmt.Errorf("sequence %d is not a valid event: %w", m.Seq, m.Err)
		}
		stored[m.Event.Event.ID()]++
		return nil
	})
	if err != nil {
		t.Fatalf("read the stream: %v", err)
	}
	missing, twice, total := 0, 0, 0
	acked.Range(func(id, _ any) bool {
		total++
		switch stored[id.(string)] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
		return true
	})
	if total != burst || missing != 0 || twice != 0 || len(stored) != burst {
		t.Fatalf("%d events acknowledged of %d; %d of them missing from the stream and %d stored twice; the stream holds %d distinct events",
			total, burst, missing, twice, len(stored))
	}

	// The consumer goes on: it handles every acknowledged event, and one published now.
	last := b.publishAssigned(t, node)
	caughtUp := time.Now()
	eventually(t, time.Minute, "the consumer handled every event", func() bool {
		calls, _ := rec.snapshot()
		if calls[last.ID()] == 0 {
			return false
		}
		done := true
		acked.Range(func(id, _ any) bool {
			done = calls[id.(string)] > 0
			return done
		})
		return done
	})
	t.Logf("the consumer handled the last event %s after it was published", time.Since(caughtUp).Round(time.Millisecond))
}

// stopStreamLeader stops the server that leads S3CSI_EVENTS and returns its name.
func stopStreamLeader(cl *testenv.NATSCluster) (string, error) {
	for i := range cl.Len() {
		srv := cl.Server(i)
		if srv != nil && srv.JetStreamIsStreamLeader("$G", events.StreamName) {
			name := srv.Name()
			cl.StopServer(i)
			return name, nil
		}
	}
	return "", errors.New("no server leads the stream")
}
