package events_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
)

func TestReplay(t *testing.T) {
	b := newBus(t)
	pub := func(typ events.Type, node string) string {
		e := mustNew(t, payload(typ, node))
		b.publish(t, e)
		return e.ID()
	}
	pub(events.TypeAttachmentAssigned, "node-a") // before the start
	pub(events.TypeMountpointNeedsUnmount, "node-a")
	time.Sleep(20 * time.Millisecond)
	startTime := time.Now()
	time.Sleep(20 * time.Millisecond)
	var (
		a1  = pub(events.TypeAttachmentAssigned, "node-a")
		_   = pub(events.TypeAttachmentAssigned, "node-b")
		a2  = pub(events.TypeMountpointNeedsUnmount, "node-a")
		a3  = pub(events.TypeVolumePublished, "node-a")
		c1  = pub(events.TypeVolumeCreated, "")
		_   = pub(events.TypeMountpointNeedsUnmount, "node-b.example")
		sub = mustSubject(t, events.TypeAttachmentAssigned, "node-a")
	)
	b.publishRaw(t, sub, []byte("not an event"))
	a4 := pub(events.TypeMountpointNeedsUnmount, "node-a")
	startSeq := uint64(3) // a1

	tests := []struct {
		name        string
		opts        events.ReplayOptions
		want        []string
		wantInvalid int
	}{
		{name: "from a sequence, the later events of the types about the node, in order",
			opts: events.ReplayOptions{StartSeq: startSeq, Node: "node-a",
				Types: []events.Type{events.TypeAttachmentAssigned, events.TypeMountpointNeedsUnmount}},
			want: []string{a1, a2, a4}, wantInvalid: 1},
		{name: "from a time, the same",
			opts: events.ReplayOptions{StartTime: startTime, Node: "node-a",
				Types: []events.Type{events.TypeAttachmentAssigned, events.TypeMountpointNeedsUnmount}},
			want: []string{a1, a2, a4}, wantInvalid: 1},
		{name: "a node filter keeps cluster-scoped types it selects",
			opts: events.ReplayOptions{StartSeq: startSeq, Node: "node-a",
				Types: []events.Type{events.TypeVolumePublished, events.TypeVolumeCreated}},
			want: []string{a3, c1}},
		{name: "nothing selected returns at once", opts: events.ReplayOptions{Types: []events.Type{events.TypeVolumeDeleted}}},
		{name: "a start after the last event returns at once", opts: events.ReplayOptions{StartSeq: 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			invalid := 0
			tt.opts.Invalid = func(*jetstream.MsgMetadata, error) { invalid++ }
			err := events.Replay(testContext(t, 10*time.Second), b.js, tt.opts,
				func(d *events.Decoded, _ *jetstream.MsgMetadata) error {
					got = append(got, d.Event.ID())
					return nil
				})
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			if !slices.Equal(got, tt.want) || invalid != tt.wantInvalid {
				t.Errorf("replayed %q with %d invalid, want %q with %d", got, invalid, tt.want, tt.wantInvalid)
			}
		})
	}

	t.Run("no replay leaves a consumer behind", func(t *testing.T) {
		s, err := b.js.Stream(testContext(t, 5*time.Second), events.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		if n := s.CachedInfo().State.Consumers; n != 0 {
			t.Errorf("stream has %d consumers after the replays, want 0", n)
		}
	})

	t.Run("an error of fn stops the replay and is returned", func(t *testing.T) {
		stop := errors.New("stop here")
		calls := 0
		err := events.Replay(testContext(t, 10*time.Second), b.js, events.ReplayOptions{},
			func(*events.Decoded, *jetstream.MsgMetadata) error { calls++; return stop })
		if !errors.Is(err, stop) || calls != 1 {
			t.Errorf("replay = %v after %d calls, want %v after 1", err, calls, stop)
		}
	})

	t.Run("events stored after the replay started are not read", func(t *testing.T) {
		var got []string
		err := events.Replay(testContext(t, 10*time.Second), b.js, events.ReplayOptions{StartSeq: 10},
			func(d *events.Decoded, _ *jetstream.MsgMetadata) error {
				if len(got) == 0 {
					pub(events.TypeAttachmentAssigned, "node-a") // sequence 11, after the snapshot
				}
				got = append(got, d.Event.ID())
				return nil
			})
		if err != nil || !slices.Equal(got, []string{a4}) {
			t.Errorf("replay = %v, read %q; want only %q", err, got, a4)
		}
	})
}

func mustSubject(t *testing.T, typ events.Type, node string) string {
	t.Helper()
	s, err := events.Subject(typ, node)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
