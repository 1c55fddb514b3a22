package events_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
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
	s, err = events.EnsureStream(ctx, b.js, events.StreamConfig{MaxAge: time.Hour, DuplicateWindow: time.Minute})
	if err != nil {
		t.Fatalf("update the stream: %v", err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxAge != time.Hour || cfg.Duplicates != time.Minute {
		t.Errorf("updated stream has max age %s and duplicate window %s", cfg.MaxAge, cfg.Duplicates)
	}
	if _, err := events.EnsureStream(ctx, b.js, events.StreamConfig{MaxAge: time.Minute, DuplicateWindow: time.Hour}); err == nil {
		t.Error("a duplicate window longer than the max age was accepted")
	}
}
