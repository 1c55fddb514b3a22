//go:build containers

package containers

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/s3csi/s3csi/shared/events"
)

// dialCSI connects to a CSI socket as kubelet and external-provisioner do.
func dialCSI(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func mountCapability(flags ...string) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
}

// audit reads the S3CSI_EVENTS stream from its first event, as `kubectl s3csi events` does,
// through NATS's published port.
type audit struct {
	mu     sync.Mutex
	events []*events.Decoded
	seqs   []uint64
}

func (s *stack) audit() *audit {
	s.t.Helper()
	a := &audit{}
	// RetryOnFailedConnect: a NATS container just started again may not listen yet.
	nc, err := nats.Connect(s.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		s.t.Fatalf("connect to NATS at %s: %v", s.natsURL, err)
	}
	s.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// The services create the stream when they first publish; an ordered consumer
			// survives the NATS container's restart by recreating itself.
			c, err := js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ctx.Err() == nil {
				msgs, err := c.Fetch(100, jetstream.FetchMaxWait(500*time.Millisecond))
				if err != nil {
					break
				}
				for m := range msgs.Messages() {
					meta, merr := m.Metadata()
					d, derr := events.Decode(m.Data())
					if merr != nil || derr != nil {
						continue
					}
					a.mu.Lock()
					a.events = append(a.events, d)
					a.seqs = append(a.seqs, meta.Sequence.Stream)
					a.mu.Unlock()
				}
				if err := msgs.Error(); err != nil && !errors.Is(err, context.Canceled) {
					break
				}
			}
		}
	}()
	s.t.Cleanup(func() { cancel(); <-done })
	return a
}

// about returns the types of the events whose payload mentions s (a pod UID, a volume), in
// stream order.
func (a *audit) about(s string) []events.Type {
	a.mu.Lock()
	defer a.mu.Unlock()
	var types []events.Type
	for _, d := range a.events {
		if bytes.Contains(d.Event.Data(), []byte(s)) {
			types = append(types, d.Type)
		}
	}
	return types
}

// ids is the id of every event read so far.
func (a *audit) ids() map[string]uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := map[string]uint64{}
	for i, d := range a.events {
		ids[d.Event.ID()] = a.seqs[i]
	}
	return ids
}

func has(types []events.Type, want events.Type) bool { return slices.Contains(types, want) }
