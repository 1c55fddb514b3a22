package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/testr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/csi-controller/internal/controller"
)

// startOutbox runs an Outbox publishing to natsURL until the test ends.
func startOutbox(t *testing.T, natsURL string) (*events.Outbox, jetstream.JetStream) {
	t.Helper()
	nc, err := events.Connect(t.Context(), natsURL, "test", testr.New(t), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	o := events.OutboxFor(js, events.OutboxOptions{Source: controller.EventSource, Log: testr.New(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Outbox.Start() = %v", err)
		}
		nc.Close()
	})
	return o, js
}

// streamEvents waits until the stream holds want events and returns them decoded.
func streamEvents(t *testing.T, js jetstream.JetStream, want int) []*events.Decoded {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := js.Stream(t.Context(), events.StreamName)
		if err == nil {
			info, err := s.Info(t.Context())
			if err == nil && info.State.Msgs >= uint64(want) {
				var out []*events.Decoded
				for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
					msg, err := s.GetMsg(t.Context(), seq)
					if err != nil {
						t.Fatalf("get event %d: %v", seq, err)
					}
					d, err := events.Decode(msg.Data)
					if err != nil {
						t.Fatalf("decode event %d: %v", seq, err)
					}
					out = append(out, d)
				}
				return out
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream did not hold %d events within 10s", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestVolumeEventsArePublishedOnceEach(t *testing.T) {
	bus := testenv.StartNATS(t)
	srv := testenv.StartS3(t)
	o, js := startOutbox(t, bus.URL())
	e := newEnv(t, srv, withNotifier(o))

	id := mustCreate(t, e, "pvc-events", nil)
	_ = mustCreate(t, e, "pvc-events", nil) // a retry publishes the same fact, deduplicated
	if _, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("DeleteVolume() = %v", err)
	}

	got := streamEvents(t, js, 2)
	if len(got) != 2 {
		t.Fatalf("stream holds %d events, want 2 (created once, deleted once)", len(got))
	}
	created, ok := got[0].Payload.(*eventspb.VolumeCreated)
	if !ok || created.GetVolumeId() != id || created.GetRequestName() != "pvc-events" {
		t.Errorf("first event = %v, want volume.created of %s", got[0].Payload, id)
	}
	deleted, ok := got[1].Payload.(*eventspb.VolumeDeleted)
	if !ok || deleted.GetVolumeId() != id || !deleted.GetBucketDeleted() {
		t.Errorf("second event = %v, want volume.deleted of %s with the bucket deleted", got[1].Payload, id)
	}
	if got[0].Event.Source() != controller.EventSource {
		t.Errorf("source = %q", got[0].Event.Source())
	}
}

func TestANATSOutageNeverFailsAVolumeOperation(t *testing.T) {
	bus := testenv.StartNATS(t)
	srv := testenv.StartS3(t)
	o, js := startOutbox(t, bus.URL())
	bus.Stop()
	e := newEnv(t, srv, withNotifier(o))

	start := time.Now()
	id := mustCreate(t, e, "pvc-nats-down", nil)
	if _, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("DeleteVolume() with NATS down = %v", err)
	}
	t.Logf("CreateVolume and DeleteVolume with NATS down took %s", time.Since(start))

	t.Run("once NATS is back, the events of the outage and new ones arrive", func(t *testing.T) {
		bus.Restart(t)
		later := mustCreate(t, e, "pvc-after-outage", nil)
		want := map[string]bool{"created " + id: false, "deleted " + id: false, "created " + later: false}
		deadline := time.Now().Add(20 * time.Second)
		for {
			for _, d := range streamEvents(t, js, 1) {
				switch p := d.Payload.(type) {
				case *eventspb.VolumeCreated:
					want["created "+p.GetVolumeId()] = true
				case *eventspb.VolumeDeleted:
					want["deleted "+p.GetVolumeId()] = true
				}
			}
			missing := 0
			for _, seen := range want {
				if !seen {
					missing++
				}
			}
			if missing == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("events seen after the outage: %v, want all", want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
