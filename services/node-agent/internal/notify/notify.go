// Package notify turns the events this node receives into wake-ups, never into actions: the
// woken code re-reads the API server. The node-agent's own audit events go out through an
// events.Outbox, which never blocks a mount on the bus.
package notify

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"

	"github.com/s3csi/s3csi/services/node-agent/internal/attach"
)

// Source is the CloudEvents source of the node-agent's events.
const Source = "/s3csi/node-agent"

// Waker is woken by attachment.assigned events.
type Waker interface{ Notify(key attach.Key) }

// UnmountTrigger is asked to look at a Mountpoint Pod now rather than at the next sweep.
type UnmountTrigger interface{ Trigger(mountpointPod string) }

// EventCounter counts received events.
type EventCounter interface{ Event(eventType string) }

// Handler handles this node's events.
//
// Problem: an event can be forged, duplicated, late, or about another node.
// Solution: events only wake a waiter or a cleanup, which re-read the API server; an event
// whose payload names another node is ignored even if it arrived on this node's subject.
// Invariant: no event causes a mount or an unmount by itself.
type Handler struct {
	Node    string
	Waker   Waker
	Unmount UnmountTrigger
	Counter EventCounter
}

// Handle implements events.Handler; it never fails, so every event is acknowledged.
func (h *Handler) Handle(_ context.Context, d *events.Decoded) error {
	if h.Counter != nil {
		h.Counter.Event(string(d.Type))
	}
	if d.Node() != h.Node {
		return nil
	}
	switch p := d.Payload.(type) {
	case *eventspb.AttachmentAssigned:
		if h.Waker != nil {
			h.Waker.Notify(attach.Key{PodUID: p.GetWorkloadPodUid(), PVName: p.GetPvName()})
		}
	case *eventspb.MountpointNeedsUnmount:
		if h.Unmount != nil {
			h.Unmount.Trigger(p.GetMountpointPodName())
		}
	}
	return nil
}

// ConsumerConfig is the durable consumer of node's events.
func ConsumerConfig(node string) events.ConsumerConfig {
	return events.ConsumerConfig{
		Durable:        events.NodeAgentDurable(node),
		FilterSubjects: events.NodeSubjects(node, events.TypeAttachmentAssigned, events.TypeMountpointNeedsUnmount),
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		// A wake-up is only useful now; a failed one is never retried for long.
		MaxDeliver: 3,
	}
}
