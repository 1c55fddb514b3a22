// Package replay republishes a selected range of the s3csi audit trail under another subject
// prefix, for tests and incident rehearsal: by default into the S3CSI_REPLAY stream, off the
// subjects the services consume; into the live subjects only when asked to.
package replay

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"

	"github.com/s3csi/s3csi/cli/internal/audit"
)

// HeaderReplayOf is set on every replayed message: the stream and sequence it was copied from.
const HeaderReplayOf = "S3csi-Replay-Of"

// publishTimeout bounds the wait for one PubAck.
const publishTimeout = 5 * time.Second

// Target says where replayed events go.
type Target struct {
	// Prefix replaces s3csi.events in each subject, e.g. s3csi.replay.rehearsal.
	Prefix string
	// Stream must store every replayed event (its PubAck names it). Empty: S3CSI_EVENTS for
	// the live prefix, S3CSI_REPLAY (created when missing) under s3csi.replay.
	Stream string
	// Live allows the live prefix s3csi.events: the services act on what is replayed there.
	Live bool
}

// subjectPrefix is dot-separated tokens without wildcards or spaces.
var subjectPrefix = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// streamName is a JetStream stream name.
var streamName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

// IsLive reports whether subjects under prefix land in the live stream.
func IsLive(prefix string) bool {
	return prefix == events.SubjectPrefix || strings.HasPrefix(prefix, events.SubjectPrefix+".")
}

// Validate reports what is wrong with t, naming the flag; it fills in the default stream.
func (t *Target) Validate() error {
	if !subjectPrefix.MatchString(t.Prefix) {
		return fmt.Errorf("--to-prefix %q: want dot-separated tokens of letters, digits, '-' and '_'", t.Prefix)
	}
	if t.Stream != "" && !streamName.MatchString(t.Stream) {
		return fmt.Errorf("--to-stream %q is not a stream name", t.Stream)
	}
	live := IsLive(t.Prefix)
	switch {
	case live && t.Prefix != events.SubjectPrefix:
		return fmt.Errorf("--to-prefix %s is under the live prefix %s: its subjects would be stored in %s "+
			"where no service expects them; replay into %s itself (with --live) or elsewhere",
			t.Prefix, events.SubjectPrefix, events.StreamName, events.SubjectPrefix)
	case live && !t.Live:
		return fmt.Errorf("--to-prefix %s is the live prefix: the services would act on the replayed events; "+
			"add --live to do that on purpose", t.Prefix)
	case !live && t.Live:
		return fmt.Errorf("--live is only for --to-prefix %s", events.SubjectPrefix)
	}
	if t.Stream == "" {
		switch {
		case live:
			t.Stream = events.StreamName
		case t.Prefix == events.ReplaySubjectPrefix || strings.HasPrefix(t.Prefix, events.ReplaySubjectPrefix+"."):
			t.Stream = events.ReplayStreamName
		default:
			return fmt.Errorf("--to-stream: name the stream that stores the subjects %s.>", t.Prefix)
		}
	}
	return nil
}

// Subject is where an event stored on subject is replayed.
func (t *Target) Subject(subject string) string {
	return t.Prefix + strings.TrimPrefix(subject, events.SubjectPrefix)
}

// Result counts what a replay did.
type Result struct {
	// Published were stored by the target stream; Duplicates it already held (same event id
	// inside its duplicate window); Invalid were skipped; First and Last are the sequences of
	// the first and last event replayed.
	Published, Duplicates, Invalid int
	First, Last                    uint64
}

// Run replays the events of sel stored when it starts into t, in order. onInvalid is told about
// each invalid message (skipped). A failed publish stops the replay: its error names the
// sequence to resume from (--from-seq).
func Run(ctx context.Context, js jetstream.JetStream, sel audit.Selection, t Target,
	onInvalid func(seq uint64, reason string),
) (Result, error) {
	var res Result
	if t.Stream == events.ReplayStreamName {
		if _, err := events.EnsureReplayStream(ctx, js); err != nil {
			return res, err
		}
	}
	var pod *audit.PodTracker
	if sel.Pod != "" {
		ref, err := audit.ParsePod(sel.Pod, sel.Namespace)
		if err != nil {
			return res, err
		}
		pod = audit.NewPodTracker(ref)
	}
	view := &audit.View{Sel: sel, Pod: pod, Out: &publisher{ctx: ctx, js: js, t: t, res: &res, onInvalid: onInvalid}}
	err := view.Read(ctx, js, time.Now(), false, nil)
	return res, err
}

// publisher is the Printer of a replay: it publishes each selected record.
type publisher struct {
	ctx       context.Context //nolint:containedctx // the replay's context, for the Printer interface
	js        jetstream.JetStream
	t         Target
	res       *Result
	onInvalid func(seq uint64, reason string)
}

func (p *publisher) Print(r audit.Record) error {
	if r.Invalid != "" {
		p.res.Invalid++
		if p.onInvalid != nil {
			p.onInvalid(r.Seq, r.Invalid)
		}
		return nil
	}
	msg := nats.NewMsg(p.t.Subject(r.Subject))
	msg.Data = r.Event
	msg.Header.Set("Content-Type", events.MessageContentType)
	msg.Header.Set(HeaderReplayOf, events.StreamName+"/"+strconv.FormatUint(r.Seq, 10))
	ctx, cancel := context.WithTimeout(p.ctx, publishTimeout)
	defer cancel()
	ack, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(r.ID), jetstream.WithExpectStream(p.t.Stream))
	if err != nil {
		return &StoppedError{Seq: r.Seq, Subject: msg.Subject, Err: err}
	}
	if ack.Duplicate {
		p.res.Duplicates++
	} else {
		p.res.Published++
	}
	if p.res.First == 0 {
		p.res.First = r.Seq
	}
	p.res.Last = r.Seq
	return nil
}

func (p *publisher) Flush() error { return nil }

// StoppedError is a publish that failed: nothing from Seq on was replayed.
type StoppedError struct {
	Seq     uint64
	Subject string
	Err     error
}

func (e *StoppedError) Error() string {
	return fmt.Sprintf("replay stopped at sequence %d (publish to %s: %v); resume with --from-seq %d", e.Seq, e.Subject, e.Err, e.Seq)
}

func (e *StoppedError) Unwrap() error { return e.Err }
