package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults and bounds of ReadStream.
const (
	// DefaultPollInterval is how often a following ReadStream asks for events stored after the
	// last one it handed over.
	DefaultPollInterval = 500 * time.Millisecond
	// readBatch is how many messages one direct-get request asks for.
	readBatch = 256
	// readBatchBytes bounds the bytes the server sends for one request (at least one message).
	readBatchBytes = 1 << 20
	// readTimeout bounds the wait for each reply of a direct-get request.
	readTimeout = 5 * time.Second
)

// Header names of a direct-get reply (set by the server) and of its status line.
const (
	hdrSequence  = "Nats-Sequence"
	hdrTimeStamp = "Nats-Time-Stamp"
	hdrSubject   = "Nats-Subject"
	hdrStatus    = "Status"
	hdrDesc      = "Description"
)

// ErrNoDirectRead is returned when the stream does not serve direct reads (allow_direct): a
// stream EnsureStream did not create, which the services never change.
var ErrNoDirectRead = errors.New("stream does not allow direct reads (allow_direct)")

// StoredEvent is one message of the stream as ReadStream hands it over.
type StoredEvent struct {
	// Seq is the stream sequence; Time when the stream stored it; Subject where it was published.
	Seq     uint64
	Time    time.Time
	Subject string
	// Data is the message body as stored, at most MaxEventSize plus headers (the stream's limit).
	Data []byte
	// Event is the decoded event; nil when Err is set.
	Event *Decoded
	// Err, wrapping ErrInvalidEvent, says why the message is not a valid event on its subject.
	Err error
}

// ReadOptions select the messages ReadStream reads.
type ReadOptions struct {
	// StartSeq is the first stream sequence to read. At most one of StartSeq and StartTime
	// may be set; with neither, every retained message is read.
	StartSeq uint64
	// StartTime reads the messages stored at or after this time.
	StartTime time.Time
	// EndSeq is the last stream sequence to read; 0 means the last one stored when ReadStream
	// starts (or, with Follow, no end).
	EndSeq uint64
	// Subjects select messages by subject, NATS wildcards allowed (every event subject when
	// empty). Other messages are not handed over and not decoded.
	Subjects []string
	// Follow keeps reading the messages stored later until ctx is done or EndSeq is reached.
	Follow bool
	// PollInterval is the pause of a following read between two looks for new messages
	// (default DefaultPollInterval).
	PollInterval time.Duration
}

// ReadStream calls fn, in stream order, for every selected message of S3CSI_EVENTS, valid or
// not, and returns nil at the end (see ReadOptions.EndSeq and Follow). An error of fn stops the
// read and is returned; so is ctx's error when it ends a read that follows.
//
// Problem: an audit read must change nothing on the bus, yet a JetStream consumer is server
// state, and subject permissions cannot confine a user who may create consumers to its own:
// it could alter or delete a service's durable consumer.
// Solution: read with batched direct gets ($JS.API.DIRECT.GET.S3CSI_EVENTS), which only load
// stored messages; any replica answers them. A user allowed STREAM.INFO and DIRECT.GET of the
// stream, and its own inbox, can read the audit trail and do nothing else (PermissionsOf).
// Invariant: ReadStream publishes only JetStream API requests that read; messages are handed
// over once each, in increasing sequence, without gaps other than messages expired or deleted.
func ReadStream(ctx context.Context, js jetstream.JetStream, opts ReadOptions, fn func(StoredEvent) error) error {
	if opts.StartSeq != 0 && !opts.StartTime.IsZero() {
		return errors.New("read events: select start: both StartSeq and StartTime are set")
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	stream, err := js.Stream(ctx, StreamName)
	if err != nil {
		return fmt.Errorf("read events: look up stream %s: %w", StreamName, err)
	}
	info := stream.CachedInfo()
	if !info.Config.AllowDirect {
		return fmt.Errorf("read events from %s: %w", StreamName, ErrNoDirectRead)
	}
	end := opts.EndSeq
	if end == 0 && !opts.Follow {
		if end = info.State.LastSeq; end == 0 {
			return nil // nothing stored
		}
	}
	r := &reader{
		nc:      js.Conn(),
		subject: apiPrefix(js) + "DIRECT.GET." + StreamName,
		filter:  SubjectPrefix + ".>",
	}
	if len(opts.Subjects) == 1 {
		r.filter = opts.Subjects[0]
	}
	next := opts.StartSeq
	start := opts.StartTime
	for {
		if end != 0 && next > end {
			return nil
		}
		n, last, err := r.batch(ctx, next, start, func(m StoredEvent) error {
			if end != 0 && m.Seq > end {
				return nil
			}
			if !matchesAny(opts.Subjects, m.Subject) {
				return nil
			}
			return fn(decodeStored(m))
		})
		if err != nil {
			return fmt.Errorf("read events from %s: %w", StreamName, err)
		}
		if n > 0 {
			next, start = last+1, time.Time{}
			continue
		}
		if !opts.Follow {
			return nil
		}
		if err := sleep(ctx, opts.PollInterval); err != nil {
			return fmt.Errorf("read events from %s: %w", StreamName, err)
		}
	}
}

// apiPrefix is the prefix of js's JetStream API subjects, "$JS.API." unless js was made with
// another prefix or a domain.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}

// decodeStored decodes m.Data and checks it against its subject, filling Event or Err.
func decodeStored(m StoredEvent) StoredEvent {
	d, err := Decode(m.Data)
	if err == nil {
		err = checkSubject(d, m.Subject)
	}
	if err != nil {
		m.Err = err
		return m
	}
	m.Event = d
	return m
}

// reader sends direct-get requests for one stream.
type reader struct {
	nc      *nats.Conn
	subject string
	filter  string
}

// directGet is the body of a batched direct-get request ($JS.API.DIRECT.GET.<stream>).
type directGet struct {
	Seq       uint64     `json:"seq,omitempty"`
	NextBySub string     `json:"next_by_subj"`
	Batch     int        `json:"batch"`
	MaxBytes  int        `json:"max_bytes"`
	StartTime *time.Time `json:"start_time,omitempty"`
}

// batch asks for the messages from seq (or from start, when set) on r.filter and calls fn for
// each; it returns how many arrived and the sequence of the last one.
func (r *reader) batch(ctx context.Context, seq uint64, start time.Time, fn func(StoredEvent) error) (int, uint64, error) {
	req := directGet{Seq: seq, NextBySub: r.filter, Batch: readBatch, MaxBytes: readBatchBytes}
	if !start.IsZero() {
		t := start.UTC()
		req.StartTime, req.Seq = &t, 0
	}
	body, err := json.Marshal(req)
	if err != nil {
		return 0, 0, fmt.Errorf("encode direct get: %w", err)
	}
	// A fresh inbox per request: a late reply of an earlier, abandoned request can never be
	// taken for one of this request.
	inbox := r.nc.NewRespInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, 0, fmt.Errorf("subscribe to direct get replies: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := r.nc.PublishRequest(r.subject, inbox, body); err != nil {
		return 0, 0, fmt.Errorf("send direct get: %w", err)
	}
	var n int
	var last uint64
	for {
		wctx, cancel := context.WithTimeout(ctx, readTimeout)
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return n, last, fmt.Errorf("direct get from sequence %d: no reply within %s", seq, readTimeout)
		case errors.Is(err, nats.ErrNoResponders):
			return n, last, fmt.Errorf("direct get: %w", ErrNoDirectRead)
		case err != nil:
			return n, last, fmt.Errorf("direct get from sequence %d: %w", seq, err)
		}
		switch status := msg.Header.Get(hdrStatus); status {
		case "":
		case "204": // end of batch
			return n, last, nil
		case "404": // nothing stored from seq on
			return n, last, nil
		case "503":
			return n, last, fmt.Errorf("direct get: %w", ErrNoDirectRead)
		default:
			return n, last, fmt.Errorf("direct get from sequence %d: status %s %s", seq, status, msg.Header.Get(hdrDesc))
		}
		m, err := storedFrom(msg)
		if err != nil {
			return n, last, err
		}
		n, last = n+1, m.Seq
		if err := fn(m); err != nil {
			return n, last, err
		}
	}
}

// storedFrom reads the stream's headers of one direct-get reply.
func storedFrom(msg *nats.Msg) (StoredEvent, error) {
	seq, err := strconv.ParseUint(msg.Header.Get(hdrSequence), 10, 64)
	if err != nil {
		return StoredEvent{}, fmt.Errorf("direct get reply without a valid %s header", hdrSequence)
	}
	ts, err := time.Parse(time.RFC3339Nano, msg.Header.Get(hdrTimeStamp))
	if err != nil {
		return StoredEvent{}, fmt.Errorf("direct get reply %d without a valid %s header", seq, hdrTimeStamp)
	}
	return StoredEvent{Seq: seq, Time: ts, Subject: msg.Header.Get(hdrSubject), Data: msg.Data}, nil
}

// matchesAny reports whether subject matches one of the filters (every subject when none).
func matchesAny(filters []string, subject string) bool {
	if len(filters) == 0 {
		return true
	}
	for _, f := range filters {
		if MatchSubject(f, subject) {
			return true
		}
	}
	return false
}

// MatchSubject reports whether subject matches the NATS filter ("*" one token, ">" the rest).
func MatchSubject(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}
