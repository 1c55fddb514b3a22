package controller

import (
	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/events"
)

// EventSource is the CloudEvents source of every event the csi-controller publishes.
const EventSource = "/s3csi/csi-controller"

// Notifier publishes an event after the work it describes; *events.Outbox is one.
//
// Problem: events are hints for the audit trail; a NATS outage must neither fail nor slow a
// CreateVolume or DeleteVolume that already did its work.
// Solution: Notify only queues the event and never blocks; the Outbox publishes it in the
// background and retries while NATS is away.
// Invariant: the event id is derived from the fact (bucket and creation time), so a retried RPC
// that notifies the same fact again is deduplicated by the stream.
type Notifier interface {
	Notify(id string, payload proto.Message)
}

// notify sends the event of payload with the id derived from its type and parts.
func (c *Controller) notify(payload proto.Message, parts ...string) {
	if c.notifier == nil {
		return
	}
	t, err := events.TypeOf(payload)
	if err != nil {
		return // every payload the controller builds has a type: this cannot happen
	}
	c.notifier.Notify(events.DeterministicID(t, parts...), payload)
}
