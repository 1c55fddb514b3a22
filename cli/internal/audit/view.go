package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
)

// View selects messages of the stream and prints them.
type View struct {
	// Sel is what was asked for.
	Sel Selection
	// Pod tracks the pod of Sel.Pod; nil without one.
	Pod *PodTracker
	// Out prints the records.
	Out Printer

	names *Names
}

// Take prints m if the selection keeps it. Invalid messages on a selected subject are always
// printed: they cannot be matched to a pod or PV, and an audit must show them.
func (v *View) Take(m events.StoredEvent) error {
	if v.names == nil {
		v.names = NewNames()
	}
	if m.Err != nil {
		return v.Out.Print(NewRecord(m, v.names))
	}
	v.names.Learn(m.Event)
	if v.Sel.PV != "" && !MentionsPV(m.Event, v.Sel.PV, v.names) {
		return nil
	}
	if v.Pod != nil && !v.Pod.Observe(m.Event) {
		return nil
	}
	r := NewRecord(m, v.names)
	if v.Pod != nil {
		v.Pod.Note(&r)
	}
	return v.Out.Print(r)
}

// Read prints the selected history, calls caughtUp, and with follow goes on printing the
// events stored later until ctx ends (which is then returned).
//
// Problem: a table is aligned over all its rows, but a follow never ends.
// Solution: read the history up to the last sequence stored when Read starts, flush it as one
// table (then caughtUp, e.g. the pod diagnosis), then follow from the next sequence, printing
// each row at once at the widths already set.
// Invariant: every message is read once: the history ends at last, the follow starts at last+1.
func (v *View) Read(ctx context.Context, js jetstream.JetStream, now time.Time, follow bool, caughtUp func() error) error {
	stream, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", events.StreamName, err)
	}
	last := stream.CachedInfo().State.LastSeq
	opts := v.Sel.ReadOptions(now)
	history := opts
	if history.EndSeq == 0 || history.EndSeq > last {
		history.EndSeq = last
	}
	if last > 0 && history.StartSeq <= history.EndSeq {
		if err := events.ReadStream(ctx, js, history, v.Take); err != nil {
			return err
		}
	}
	if err := v.Out.Flush(); err != nil {
		return err
	}
	if caughtUp != nil {
		if err := caughtUp(); err != nil {
			return err
		}
	}
	if !follow || (opts.EndSeq != 0 && opts.EndSeq <= last) {
		return nil
	}
	opts.StartTime, opts.StartSeq, opts.Follow = time.Time{}, max(opts.StartSeq, last+1), true
	return events.ReadStream(ctx, js, opts, v.Take)
}
