package events

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidEvent marks an event that can never be processed: too big, not a CloudEvents 1.0
	// JSON envelope, an unknown type, a payload that does not parse or lacks a required field,
	// or a payload about another node than its subject.
	//
	// Problem: JetStream redelivers every message that is not acknowledged, so a poison event
	// would be retried until MaxDeliver and block attention from real work.
	// Solution: every validation failure wraps ErrInvalidEvent, and the consumer terminates
	// (msg.Term) such messages instead of negatively acknowledging them.
	// Invariant: errors.Is(err, ErrInvalidEvent) is true only for faults of the bytes, never
	// for a transient failure of a consumer.
	ErrInvalidEvent = errors.New("invalid event")

	// ErrUnknownType is returned for a payload message or type name outside the catalog. A
	// decoded unknown type also wraps ErrInvalidEvent.
	ErrUnknownType = errors.New("unknown event type")

	// ErrPermanent is wrapped by a Handler's error when retrying cannot help (e.g. the event
	// refers to an object in a state it can never be processed from). The consumer terminates
	// the message instead of redelivering it.
	ErrPermanent = errors.New("permanent failure")
)

// invalid returns an error wrapping ErrInvalidEvent with a reason.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidEvent, fmt.Sprintf(format, args...))
}
