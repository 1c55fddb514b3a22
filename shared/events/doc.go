// Package events is the s3csi event bus: the catalog of CloudEvents types and their NATS
// subjects, the CloudEvents 1.0 JSON envelope around protojson payloads (eventspb), and the
// JetStream plumbing every service shares: Connect, EnsureStream, Publisher, Consumer, Replay.
//
// An event is a hint that something changed; the API server stays the source of truth. So the
// bus promises at-least-once delivery, never exactly-once: handlers
// re-read what they act on and are idempotent, producers give facts deterministic ids so a
// republished fact is dropped inside the stream's duplicate window, and anything that can never
// be processed (ErrInvalidEvent, ErrPermanent) is terminated instead of redelivered.
//
// Subjects are s3csi.events.<noun>.<verb>[.<node token>]; node-scoped events carry the node in
// the payload and a consumer checks that payload and subject agree (NodeToken, Subject).
package events
