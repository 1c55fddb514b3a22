package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go/jetstream"
)

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
// It reads like ReadStream, with direct gets: it leaves no state on the server, changes no
// consumer's position and can run while services consume, with read rights only.
func Replay(ctx context.Context, js jetstream.JetStream, opts ReplayOptions,
	fn func(d *Decoded, meta *jetstream.MsgMetadata) error,
) error {
	subjects, err := opts.subjects()
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
	err = ReadStream(ctx, js, ReadOptions{StartSeq: opts.StartSeq, StartTime: opts.StartTime, Subjects: subjects},
		func(m StoredEvent) error {
			meta := &jetstream.MsgMetadata{
				Sequence:  jetstream.SequencePair{Stream: m.Seq},
				Timestamp: m.Time,
				Stream:    StreamName,
			}
			if m.Err != nil {
				invalidFn(meta, m.Err)
				return nil
			}
			if err := fn(m.Event, meta); err != nil {
				return fmt.Errorf("replay event %d: %w", m.Seq, err)
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("replay events: %w", err)
	}
	return nil
}

// subjects are the filter subjects of the selected types and node.
func (o ReplayOptions) subjects() ([]string, error) {
	for _, t := range o.Types {
		if !t.Known() {
			return nil, fmt.Errorf("select type %q: %w", t, ErrUnknownType)
		}
	}
	if o.Node != "" && !ValidNode(o.Node) {
		return nil, fmt.Errorf("select node: invalid node name %q", o.Node)
	}
	if o.StartSeq != 0 && !o.StartTime.IsZero() {
		return nil, errors.New("select start: both StartSeq and StartTime are set")
	}
	return NodeSubjects(o.Node, o.Types...), nil
}
