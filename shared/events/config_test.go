package events_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/testenv"
)

func TestNewConsumerRefusesBadConfigs(t *testing.T) {
	ok := func(context.Context, *events.Decoded) error { return nil }
	node := events.NodeSubjects("node-a")
	tests := []struct {
		name    string
		cfg     events.ConsumerConfig
		handler events.Handler
	}{
		{name: "no durable name", cfg: events.ConsumerConfig{FilterSubjects: node}, handler: ok},
		{name: "a durable name with a dot", cfg: events.ConsumerConfig{Durable: "a.b", FilterSubjects: node}, handler: ok},
		{name: "no filter subjects", cfg: events.ConsumerConfig{Durable: "a"}, handler: ok},
		{name: "a filter subject outside the stream",
			cfg: events.ConsumerConfig{Durable: "a", FilterSubjects: []string{"other.>"}}, handler: ok},
		{name: "a negative backoff",
			cfg: events.ConsumerConfig{Durable: "a", FilterSubjects: node, Backoff: []time.Duration{-1}}, handler: ok},
		{name: "no handler", cfg: events.ConsumerConfig{Durable: "a", FilterSubjects: node}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := events.NewConsumer(nil, tt.cfg, tt.handler, logr.Discard()); err == nil {
				t.Error("NewConsumer accepted the config")
			}
		})
	}
}

func TestEnsureStream(t *testing.T) {
	b := newBus(t) // has called EnsureStream with the defaults
	ctx := testContext(t, 10*time.Second)
	s, err := events.EnsureStream(ctx, b.js, events.StreamConfig{})
	if err != nil {
		t.Fatalf("ensure the stream a second time: %v", err)
	}
	cfg := s.CachedInfo().Config
	if !slices.Equal(cfg.Subjects, []string{"s3csi.events.>"}) || cfg.Retention != jetstream.LimitsPolicy ||
		cfg.MaxAge != 7*24*time.Hour || cfg.Duplicates != 2*time.Minute || cfg.Storage != jetstream.FileStorage {
		t.Errorf("stream config %+v is not the default", cfg)
	}
	// An operator's limits (here the defaults) are kept: EnsureStream never updates a stream.
	s, err = events.EnsureStream(ctx, b.js, events.StreamConfig{MaxAge: time.Hour, DuplicateWindow: time.Minute})
	if err != nil {
		t.Fatalf("ensure the stream with other limits: %v", err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxAge != 7*24*time.Hour || cfg.Duplicates != 2*time.Minute {
		t.Errorf("the existing stream's limits changed to max age %s and duplicate window %s", cfg.MaxAge, cfg.Duplicates)
	}
	if _, err := events.EnsureStream(ctx, b.js, events.StreamConfig{MaxAge: time.Minute, DuplicateWindow: time.Hour}); err == nil {
		t.Error("a duplicate window longer than the max age was accepted")
	}
}

func TestEnsureStreamReplicas(t *testing.T) {
	tests := []struct {
		name     string
		replicas int
		wantErr  []string
	}{
		{name: "zero replicas take the default of one", replicas: 0},
		{name: "one replica is created on a single server", replicas: 1},
		{
			name: "three replicas on a server that is not clustered fail naming the option to fix", replicas: 3,
			wantErr: []string{"not clustered", "--nats-stream-replicas=1", "replicas > 1 not supported"},
		},
		{name: "six replicas are refused before asking the server", replicas: 6, wantErr: []string{"invalid config"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testenv.StartNATS(t)
			nc, err := nats.Connect(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			s, err := events.EnsureStream(testContext(t, 10*time.Second), js, events.StreamConfig{Replicas: tt.replicas})
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("EnsureStream() = nil, want an error with %q", tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("EnsureStream() = %v, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("EnsureStream() = %v", err)
			}
			if got := s.CachedInfo().Config.Replicas; got != 1 {
				t.Errorf("stream replicas = %d, want 1", got)
			}
		})
	}
}

func TestOutboxCreatesAMissingStreamWithItsStreamConfig(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m := outboxMetrics(t)
	o := events.OutboxFor(js, events.OutboxOptions{Metrics: m, Log: testr.New(t),
		Stream: events.StreamConfig{Replicas: 1, MaxAge: time.Hour}})
	stop := runOutbox(o)
	defer stop()
	o.Enqueue(outboxEvent(t, "first"))
	eventually(t, 20*time.Second, "the event is published", func() bool { return m.Count(unmountType, "published") == 1 })
	s, err := js.Stream(testContext(t, 10*time.Second), events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.Replicas != 1 || cfg.MaxAge != time.Hour {
		t.Errorf("stream replicas %d and max age %s, want 1 and 1h from OutboxOptions.Stream", cfg.Replicas, cfg.MaxAge)
	}
}
