package events_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
)

// TestTheAuditUserReadsTheStreamAndChangesNothing runs the users of kubectl s3csi against the
// generated permissions: both read every event with ReadStream, and every way of changing the
// bus (publishing a live type, a consumer, the stream) is refused.
func TestTheAuditUserReadsTheStreamAndChangesNothing(t *testing.T) {
	a := startAuthNATS(t)
	reconciler := a.connectAs(t, events.ServicePodReconciler)
	if _, err := events.EnsureStream(ctxFor(t, 10*time.Second), reconciler.js, events.StreamConfig{}); err != nil {
		t.Fatalf("a service creates the stream: %v", err)
	}
	e := mustNew(t, payload(events.TypeAttachmentAssigned, "node-1"))
	data, _ := events.Encode(e)
	live := mustSubject(t, events.TypeAttachmentAssigned, "node-1")
	if _, err := reconciler.js.Publish(ctxFor(t, 5*time.Second), live, data, jetstream.WithMsgID(e.ID())); err != nil {
		t.Fatalf("publish: %v", err)
	}

	for _, user := range []events.Service{events.UserAudit, events.UserReplay} {
		t.Run(string(user)+" reads every event with ReadStream", func(t *testing.T) {
			c := a.connectAs(t, user)
			var got []string
			err := events.ReadStream(ctxFor(t, 10*time.Second), c.js, events.ReadOptions{}, func(m events.StoredEvent) error {
				if m.Err != nil {
					t.Errorf("sequence %d: %v", m.Seq, m.Err)
					return nil
				}
				got = append(got, m.Event.Event.ID())
				return nil
			})
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if len(got) != 1 || got[0] != e.ID() {
				t.Fatalf("read %v, want [%s]", got, e.ID())
			}
		})
	}

	refused := []struct {
		name string
		do   func(c *client) error
		// async: the client's call returns nil; the server reports the violation later.
		async bool
	}{
		{name: "publish a live event type", do: func(c *client) error {
			_, err := c.js.Publish(ctxFor(t, 500*time.Millisecond), live, data)
			return err
		}},
		{name: "create a consumer", do: func(c *client) error {
			_, err := c.js.CreateOrUpdateConsumer(ctxFor(t, time.Second), events.StreamName,
				jetstream.ConsumerConfig{Durable: "audit", AckPolicy: jetstream.AckExplicitPolicy})
			return err
		}},
		{name: "take over the janitor's consumer", do: func(c *client) error {
			_, err := c.js.CreateOrUpdateConsumer(ctxFor(t, time.Second), events.StreamName,
				jetstream.ConsumerConfig{Durable: events.JanitorDurable, AckPolicy: jetstream.AckExplicitPolicy})
			return err
		}},
		{name: "update the stream", do: func(c *client) error {
			_, err := c.js.UpdateStream(ctxFor(t, time.Second), jetstream.StreamConfig{
				Name: events.StreamName, Subjects: []string{events.SubjectPrefix + ".>"}, MaxAge: time.Minute})
			return err
		}},
		{name: "purge the stream", do: func(c *client) error {
			s, err := c.js.Stream(ctxFor(t, time.Second), events.StreamName)
			if err != nil {
				return err
			}
			return s.Purge(ctxFor(t, time.Second))
		}},
		{name: "delete the stream", do: func(c *client) error {
			return c.js.DeleteStream(ctxFor(t, time.Second), events.StreamName)
		}},
		{name: "subscribe to the services' replies", async: true, do: func(c *client) error {
			_, err := c.nc.SubscribeSync("_INBOX.>")
			return err
		}},
	}
	for _, user := range []events.Service{events.UserAudit, events.UserReplay} {
		for _, tc := range refused {
			t.Run(string(user)+" may not "+tc.name, func(t *testing.T) {
				c := a.connectAs(t, user)
				if err := tc.do(c); (err == nil) != tc.async {
					t.Fatalf("returned %v, want a permissions violation", err)
				}
				c.permissionError(t, tc.name)
			})
		}
	}

	info, err := reconciler.js.Stream(ctxFor(t, 5*time.Second), events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if msgs := info.CachedInfo().State.Msgs; msgs != 1 {
		t.Errorf("the stream holds %d messages after the refused calls, want 1", msgs)
	}
}

// TestTheReplayUserRepublishesOnlyOffTheLiveSubjects: the replay user creates the replay stream
// and publishes into it; the audit user may do neither.
func TestTheReplayUserRepublishesOnlyOffTheLiveSubjects(t *testing.T) {
	a := startAuthNATS(t)
	e := mustNew(t, payload(events.TypeMountpointNeedsUnmount, "node-1"))
	data, _ := events.Encode(e)
	subject := events.ReplaySubjectPrefix + ".rehearsal.mountpoint.needs-unmount.node-1"

	replay := a.connectAs(t, events.UserReplay)
	stream, err := events.EnsureReplayStream(ctxFor(t, 10*time.Second), replay.js)
	if err != nil {
		t.Fatalf("the replay user creates %s: %v", events.ReplayStreamName, err)
	}
	if _, err := events.EnsureReplayStream(ctxFor(t, 10*time.Second), replay.js); err != nil {
		t.Fatalf("ensure %s again: %v", events.ReplayStreamName, err)
	}
	if _, err := replay.js.Publish(ctxFor(t, 5*time.Second), subject, data, jetstream.WithExpectStream(events.ReplayStreamName)); err != nil {
		t.Fatalf("the replay user publishes under %s: %v", events.ReplaySubjectPrefix, err)
	}
	if msgs := streamMsgs(t, stream); msgs != 1 {
		t.Fatalf("%s holds %d messages, want 1", events.ReplayStreamName, msgs)
	}

	audit := a.connectAs(t, events.UserAudit)
	if _, err := audit.js.Publish(ctxFor(t, 500*time.Millisecond), subject, data); err == nil {
		t.Fatal("the audit user published a replayed event, want a permissions violation")
	}
	audit.permissionError(t, "audit publishes under "+events.ReplaySubjectPrefix)

	if err := replay.js.DeleteStream(ctxFor(t, time.Second), events.ReplayStreamName); err == nil {
		t.Fatal("the replay user deleted the replay stream, want a permissions violation")
	}
	replay.permissionError(t, "replay deletes its stream")
}
