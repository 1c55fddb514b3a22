package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/testenv"
)

// read collects what ReadStream hands over: event ids, or "invalid:<seq>".
func read(t *testing.T, js jetstream.JetStream, opts events.ReadOptions) ([]string, error) {
	t.Helper()
	var got []string
	err := events.ReadStream(testContext(t, 20*time.Second), js, opts, func(m events.StoredEvent) error {
		if m.Err != nil {
			if !errors.Is(m.Err, events.ErrInvalidEvent) {
				t.Errorf("sequence %d: error %v does not wrap ErrInvalidEvent", m.Seq, m.Err)
			}
			got = append(got, "invalid")
			return nil
		}
		got = append(got, m.Event.Event.ID())
		return nil
	})
	return got, err
}

func TestReadStream(t *testing.T) {
	b := newBus(t)
	var ids []string
	pub := func(typ events.Type, node string) {
		e := mustNew(t, payload(typ, node))
		b.publish(t, e)
		ids = append(ids, e.ID())
	}
	pub(events.TypeAttachmentAssigned, "node-a")                                   // 1
	pub(events.TypeVolumeCreated, "")                                              // 2
	b.publishRaw(t, mustSubject(t, events.TypeMountFailed, "node-a"), []byte("{")) // 3
	ids = append(ids, "invalid")
	pub(events.TypeVolumePublished, "node-b") // 4

	tests := []struct {
		name string
		opts events.ReadOptions
		want []string
	}{
		{name: "with no option every message, invalid ones included, in order", want: ids},
		{name: "from a sequence to an end sequence", opts: events.ReadOptions{StartSeq: 2, EndSeq: 3}, want: ids[1:3]},
		{name: "one subject filter", opts: events.ReadOptions{Subjects: []string{events.TypeVolumeCreated.Stem()}},
			want: ids[1:2]},
		{name: "several subject filters, with wildcards",
			opts: events.ReadOptions{Subjects: events.NodeSubjects("node-a", events.TypeAttachmentAssigned, events.TypeMountFailed)},
			want: []string{ids[0], "invalid"}},
		{name: "a start after the last message reads nothing", opts: events.ReadOptions{StartSeq: 99}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := read(t, b.js, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("read %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("a batch larger than one request is read whole", func(t *testing.T) {
		b := newBus(t)
		const n = 600 // more than one direct-get batch
		for range n {
			b.publishRaw(t, mustSubject(t, events.TypeVolumeCreated, ""), []byte("x"))
		}
		got, err := read(t, b.js, events.ReadOptions{})
		if err != nil || len(got) != n {
			t.Fatalf("read %d messages (%v), want %d", len(got), err, n)
		}
	})

	t.Run("following hands over the events stored later, until the context ends", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		later := mustNew(t, payload(events.TypeVolumeDeleted, ""))
		got := make(chan string, 16)
		done := make(chan error, 1)
		go func() {
			done <- events.ReadStream(ctx, b.js, events.ReadOptions{StartSeq: 4, Follow: true, PollInterval: 20 * time.Millisecond},
				func(m events.StoredEvent) error {
					if m.Event != nil {
						got <- m.Event.Event.ID()
					}
					return nil
				})
		}()
		if id := <-got; id != ids[3] {
			t.Fatalf("first event %s, want %s", id, ids[3])
		}
		b.publish(t, later)
		select {
		case id := <-got:
			if id != later.ID() {
				t.Fatalf("followed %s, want %s", id, later.ID())
			}
		case <-ctx.Done():
			t.Fatal("the event published later was not handed over")
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("ReadStream returned %v, want context.Canceled", err)
		}
	})
}

func TestReadStreamRefusals(t *testing.T) {
	t.Run("an absent stream is reported as not found", func(t *testing.T) {
		b := newBus(t)
		if err := b.js.DeleteStream(testContext(t, 5*time.Second), events.StreamName); err != nil {
			t.Fatal(err)
		}
		_, err := read(t, b.js, events.ReadOptions{})
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("got %v, want ErrStreamNotFound", err)
		}
	})
	t.Run("a stream without direct reads is reported", func(t *testing.T) {
		b := newBus(t)
		if _, err := b.js.UpdateStream(testContext(t, 5*time.Second), jetstream.StreamConfig{
			Name: events.StreamName, Subjects: []string{events.SubjectPrefix + ".>"}, MaxMsgSize: events.MaxEventSize + 1024,
			MaxAge: events.DefaultMaxAge, Duplicates: events.DefaultDuplicateWindow,
		}); err != nil {
			t.Fatal(err)
		}
		_, err := read(t, b.js, events.ReadOptions{})
		if !errors.Is(err, events.ErrNoDirectRead) {
			t.Fatalf("got %v, want ErrNoDirectRead", err)
		}
	})
	t.Run("both start options are refused", func(t *testing.T) {
		b := newBus(t)
		if _, err := read(t, b.js, events.ReadOptions{StartSeq: 1, StartTime: time.Now()}); err == nil {
			t.Fatal("read, want an error")
		}
	})
}

func TestMatchSubject(t *testing.T) {
	for _, tc := range []struct {
		filter, subject string
		want            bool
	}{
		{"s3csi.events.>", "s3csi.events.volume.created", true},
		{"s3csi.events.>", "s3csi.events", false},
		{"s3csi.events.volume.created", "s3csi.events.volume.created", true},
		{"s3csi.events.volume.created", "s3csi.events.volume.created.x", false},
		{"s3csi.events.*.*.node-a", "s3csi.events.mount.failed.node-a", true},
		{"s3csi.events.*.*.node-a", "s3csi.events.mount.failed.node-b", false},
		{"s3csi.events.attachment.assigned.*", "s3csi.events.attachment.assigned", false},
	} {
		if got := events.MatchSubject(tc.filter, tc.subject); got != tc.want {
			t.Errorf("MatchSubject(%q, %q) = %v, want %v", tc.filter, tc.subject, got, tc.want)
		}
	}
}

// BenchmarkReadStream reads a stream of 10 000 events (about 500 bytes each) with direct gets,
// as kubectl s3csi events does; it reports events per second.
func BenchmarkReadStream(b *testing.B) {
	srv := testenv.StartNATS(b)
	nc, err := events.Connect(context.Background(), srv.URL(), b.Name(), logr.Discard())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := events.EnsureStream(context.Background(), js, events.StreamConfig{}); err != nil {
		b.Fatal(err)
	}
	data, err := events.Encode(mustNew(b, payload(events.TypeVolumePublished, "node-a")))
	if err != nil {
		b.Fatal(err)
	}
	subject, _ := events.Subject(events.TypeVolumePublished, "node-a")
	const n = 10000
	for range n {
		if _, err := js.PublishAsync(subject, data); err != nil {
			b.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	b.ResetTimer()
	for range b.N {
		count := 0
		if err := events.ReadStream(context.Background(), js, events.ReadOptions{}, func(events.StoredEvent) error {
			count++
			return nil
		}); err != nil || count != n {
			b.Fatalf("read %d events (%v), want %d", count, err, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
}
