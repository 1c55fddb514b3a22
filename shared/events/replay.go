package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go/jetstream"
)

// replayResetAttempts bounds how often the ordered consumer is recreated after a gap or a
// failure, so that Replay fails instead of hanging while NATS is down.
const replayResetAttempts = 3

// ReplayOptions select the events Replay reads.
type ReplayOptions struct {
	// StartSeq is the first stream sequence to read. At most one of StartSeq and StartTime
	// may be set; with neither, Replay reads every retained event.
	StartSeq uint64
	// StartTime reads the events stored at or after this time.
	StartTime time.Time
	// Types selects event types (every type when empty).
	Types []Type
	// Node restricts node-scoped types to the events about this node. Cluster-scoped types
	// (volume.created/deleted) are about no node: they are included whenever Types selects
	// them, also with a Node (see NodeSubjects).
	Node string
	// Invalid is called for each stored message that is not a valid event on its subject;
	// Replay skips it. Default: log it at info level.
	Invalid func(meta *jetstream.MsgMetadata, err error)
	// Log receives skipped messages when Invalid is nil; default logr.Discard().
	Log logr.Logger
}

// Replay calls fn, in stream order, for every selected event stored up to the stream's last
// sequence at the moment Replay starts, then returns nil. It does not follow new events.
// An error of fn stops the replay and is returned. Invalid messages are skipped (see
// ReplayOptions.Invalid): a replay is an audit read and must get past poison.
//
// It reads with an ordered consumer: ephemeral, unacknowledged and self-healing on gaps, so it
// changes no durable consumer's position and can run while services consume.
func Replay(ctx context.Context, js jetstream.JetStream, opts ReplayOptions,
	fn func(d *Decoded, meta *jetstream.MsgMetadata) error,
) error {
	cfg, err := opts.consumerConfig()
	if err != nil {
		return fmt.Errorf("replay events: %w", err)
	}
	invalidFn := opts.Invalid
	if invalidFn == nil {
		log := opts.Log
		if log.GetSink() == nil {
			log = logr.Discard()
		}
		invalidFn = func(meta *jetstream.MsgMetadata, err error) {
			log.Info("skipping invalid event", "streamSeq", meta.Sequence.Stream, "reason", truncate(err.Error()))
		}
	}

	stream, err := js.Stream(ctx, StreamName)
	if err != nil {
		return fmt.Errorf("replay events: look up stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("replay events: read stream info: %w", err)
	}
	last := info.State.LastSeq
	if last == 0 || opts.StartSeq > last {
		return nil
	}

	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("replay events: create ordered consumer: %w", err)
	}
	if ci := cons.CachedInfo(); ci != nil && ci.NumPending == 0 {
		deleteConsumer(ctx, js, ci.Name)
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("replay events: iterate: %w", err)
	}
	defer func() {
		// Stop only signals the pull goroutine, which exits at once; see stopIterator.
		it.Stop()
		if ci := cons.CachedInfo(); ci != nil {
			deleteConsumer(ctx, js, ci.Name)
		}
	}()

	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("replay events: receive: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("replay events: read metadata: %w", err)
		}
		if meta.Sequence.Stream > last {
			return nil // stored after Replay started
		}
		d, err := Decode(msg.Data())
		if err == nil {
			err = checkSubject(d, msg.Subject())
		}
		if err != nil {
			invalidFn(meta, err)
		} else if err := fn(d, meta); err != nil {
			return fmt.Errorf("replay event %d: %w", meta.Sequence.Stream, err)
		}
		if meta.Sequence.Stream >= last || meta.NumPending == 0 {
			return nil
		}
	}
}

func (o ReplayOptions) consumerConfig() (jetstream.OrderedConsumerConfig, error) {
	for _, t := range o.Types {
		if !t.Known() {
			return jetstream.OrderedConsumerConfig{}, fmt.Errorf("select type %q: %w", t, ErrUnknownType)
		}
	}
	if o.Node != "" && !ValidNode(o.Node) {
		return jetstream.OrderedConsumerConfig{}, fmt.Errorf("select node: invalid node name %q", o.Node)
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:   NodeSubjects(o.Node, o.Types...),
		DeliverPolicy:    jetstream.DeliverAllPolicy,
		MaxResetAttempts: replayResetAttempts,
	}
	switch {
	case o.StartSeq != 0 && !o.StartTime.IsZero():
		return cfg, errors.New("select start: both StartSeq and StartTime are set")
	case o.StartSeq != 0:
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = o.StartSeq
	case !o.StartTime.IsZero():
		t := o.StartTime
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &t
	}
	return cfg, nil
}

// deleteConsumer removes the ephemeral consumer now instead of after its inactivity threshold.
// Best effort: the server deletes it anyway.
func deleteConsumer(ctx context.Context, js jetstream.JetStream, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	_ = js.DeleteConsumer(ctx, StreamName, name)
}
