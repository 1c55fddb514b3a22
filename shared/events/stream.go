package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of StreamConfig.
const (
	DefaultMaxAge          = 7 * 24 * time.Hour
	DefaultReplicas        = 1
	DefaultDuplicateWindow = 2 * time.Minute
	// MaxReplicas is the most copies JetStream keeps of a stream.
	MaxReplicas = 5
)

// errCodeReplicasNotSupported is JetStream's error code for replicas > 1 on a server that is
// not clustered.
const errCodeReplicasNotSupported jetstream.ErrorCode = 10074

// StreamConfig is what an operator may tune of the S3CSI_EVENTS stream; zero values take the
// defaults.
type StreamConfig struct {
	// MaxAge is how long events are kept for audit and replay (default 7 days).
	MaxAge time.Duration
	// Replicas is the number of copies in a NATS cluster (default 1).
	Replicas int
	// DuplicateWindow is how long a Nats-Msg-Id is remembered to drop a republished event
	// (default 2 minutes). Publisher retries stay inside it: keep PublisherOptions in sync.
	DuplicateWindow time.Duration
	// Storage is file (default) or memory.
	Storage jetstream.StorageType
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	return c
}

// EnsureStream returns the S3CSI_EVENTS stream on s3csi.events.>, creating it with cfg when it
// is missing. An existing stream keeps its own limits: no service may update the stream
// (PermissionsOf), so an operator's change of them, or another service's StreamConfig, is
// never overwritten. It is idempotent, so every service may call it.
//
// Retention is by limits (age), not work-queue or interest: every event stays for audit and
// replay whether or not it was consumed. The server refuses messages larger than an event
// may be (MaxEventSize, plus room for headers), so a consumer never sees one.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	cfg = cfg.withDefaults()
	if cfg.MaxAge < 0 || cfg.Replicas < 1 || cfg.Replicas > MaxReplicas || cfg.DuplicateWindow < 0 || cfg.DuplicateWindow > cfg.MaxAge {
		return nil, fmt.Errorf("ensure stream %s: invalid config %+v", StreamName, cfg)
	}
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "s3csi events (CloudEvents 1.0 JSON), kept for audit and replay",
		Subjects:    []string{SubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      cfg.MaxAge,
		MaxMsgSize:  MaxEventSize + maxHeaderSize,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DuplicateWindow,
		Storage:     cfg.Storage,
		// Audit reads (ReadStream) are direct gets: they need no consumer, so a read-only user
		// can read the stream, and every replica can answer them.
		AllowDirect: true,
	})
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeReplicasNotSupported {
		return nil, fmt.Errorf("ensure stream %s with %d replicas: the NATS server is not clustered; "+
			"set --nats-stream-replicas=1 or cluster NATS: %w", StreamName, cfg.Replicas, err)
	}
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		s, err = js.Stream(ctx, StreamName) // it exists with other limits: keep them
	}
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", StreamName, err)
	}
	return s, nil
}

// maxHeaderSize leaves room for Nats-Msg-Id and Content-Type headers in MaxMsgSize.
const maxHeaderSize = 1 << 10

// DefaultReplayMaxAge is how long the replay stream keeps replayed events.
const DefaultReplayMaxAge = 24 * time.Hour

// EnsureReplayStream returns the ReplayStreamName stream, creating it on ReplaySubjectPrefix.>
// when it is missing. An existing stream is left as it is: the replay user may create and
// inspect it, never change it.
func EnsureReplayStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, ReplayStreamName)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("look up stream %s: %w", ReplayStreamName, err)
	}
	s, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        ReplayStreamName,
		Description: "s3csi events replayed by kubectl s3csi replay, off the live subjects",
		Subjects:    []string{ReplaySubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      DefaultReplayMaxAge,
		MaxMsgSize:  MaxEventSize + maxHeaderSize,
		Duplicates:  DefaultDuplicateWindow,
		AllowDirect: true,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		s, err = js.Stream(ctx, ReplayStreamName) // created meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", ReplayStreamName, err)
	}
	return s, nil
}
