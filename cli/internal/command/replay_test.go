package command

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"

	"github.com/s3csi/s3csi/cli/internal/replay"
)

// storedMessages reads every message of stream, in order.
func storedMessages(t *testing.T, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(testContext(t), stream)
	if err != nil {
		t.Fatalf("look up %s: %v", stream, err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
		m, err := s.GetMsg(testContext(t), seq)
		if err != nil {
			t.Fatalf("get %s/%d: %v", stream, seq, err)
		}
		out = append(out, m)
	}
	return out
}

func TestReplayIntoAPrefixAsTheReplayUser(t *testing.T) {
	isolate(t)
	b := newAuthBus(t)
	scheduled := b.publish(t, &eventspb.WorkloadScheduled{Node: "node-1", PodNamespace: "default", PodName: "web-0", PodUid: uidWeb})
	assigned := b.publish(t, &eventspb.AttachmentAssigned{Node: "node-1", PvName: "pv-a", VolumeId: "vol-a",
		WorkloadPodUid: uidWeb, AttachmentName: "s3pa-a", MountpointPodName: mpWeb})
	b.publish(t, &eventspb.AttachmentAssigned{Node: "node-2", PvName: "pv-b", VolumeId: "vol-b",
		WorkloadPodUid: uidStuck, AttachmentName: "s3pa-b", MountpointPodName: mpStuck})
	garbage := b.publishRaw(t, "s3csi.events.attachment.assigned.node-1", []byte("garbage"))
	unmount := b.publish(t, &eventspb.MountpointNeedsUnmount{Node: "node-1", MountpointPodName: mpWeb, Reason: "NoWorkload"})

	args := append([]string{"replay", "--node", "node-1", "--to-prefix", "s3csi.replay.rehearsal"}, b.as(events.UserReplay)...)
	r := run(t, args...)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	wantSummary := fmt.Sprintf("replayed 3 events (sequences %d to %d) into S3CSI_REPLAY on s3csi.replay.rehearsal.>: 3 stored, 0 already there, 1 invalid skipped", scheduled, unmount)
	if strings.TrimSpace(r.stdout) != wantSummary {
		t.Errorf("stdout %q, want %q", r.stdout, wantSummary)
	}
	if !strings.Contains(r.stderr, fmt.Sprintf("skipped invalid message %d", garbage)) {
		t.Errorf("stderr does not list the invalid message %d:\n%s", garbage, r.stderr)
	}

	original := storedMessages(t, b.js, events.StreamName)
	replayed := storedMessages(t, b.js, events.ReplayStreamName)
	if len(replayed) != 3 {
		t.Fatalf("%s holds %d messages, want 3", events.ReplayStreamName, len(replayed))
	}
	for i, seq := range []uint64{scheduled, assigned, unmount} {
		src, got := original[seq-1], replayed[i]
		if want := "s3csi.replay.rehearsal" + strings.TrimPrefix(src.Subject, events.SubjectPrefix); got.Subject != want {
			t.Errorf("replayed subject %s, want %s", got.Subject, want)
		}
		if !bytes.Equal(got.Data, src.Data) {
			t.Errorf("sequence %d was not replayed byte for byte", seq)
		}
		if h := got.Header.Get(replay.HeaderReplayOf); h != fmt.Sprintf("S3CSI_EVENTS/%d", seq) {
			t.Errorf("%s = %q, want S3CSI_EVENTS/%d", replay.HeaderReplayOf, h, seq)
		}
	}

	t.Run("replaying the same range again stores nothing new (same event ids)", func(t *testing.T) {
		r := run(t, args...)
		if r.code != ExitOK || !strings.Contains(r.stdout, "0 stored, 3 already there") {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("the audit user may not replay", func(t *testing.T) {
		r := run(t, append([]string{"replay", "--to-prefix", "s3csi.replay.x"}, b.as(events.UserAudit)...)...)
		oneLineError(t, r, ExitFailure, `NATS denied user "audit" a request`)
	})
	t.Run("the replay user may not replay into the live subjects", func(t *testing.T) {
		r := run(t, append([]string{"replay", "--to-prefix", "s3csi.events", "--live"}, b.as(events.UserReplay)...)...)
		if r.code != ExitFailure || !strings.Contains(r.stderr, "replay stopped at sequence 1") ||
			!strings.Contains(r.stderr, "resume with --from-seq 1") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

func TestReplayIntoTheLiveSubjectsNeedsTheFlag(t *testing.T) {
	isolate(t)
	b := newBus(t) // a NATS without users, as in tests
	seq := b.publish(t, &eventspb.VolumeCreated{VolumeId: "vol-1", BucketName: "b1"})
	r := run(t, "replay", "--nats-url", b.url, "--to-prefix", "s3csi.events")
	if r.code != ExitUsage {
		t.Fatalf("exit %d without --live, want 2: %s", r.code, r.stderr)
	}
	r = run(t, "replay", "--nats-url", b.url, "--to-prefix", "s3csi.events", "--live")
	// Inside the stream's duplicate window the same event id is dropped: proof it went to the
	// live stream, and that a replay cannot double a fact the services saw moments ago.
	want := fmt.Sprintf("replayed 1 events (sequences %d to %d) into S3CSI_EVENTS on s3csi.events.>: 0 stored, 1 already there", seq, seq)
	if r.code != ExitOK || !strings.Contains(r.stdout, want) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want %q", r.code, r.stdout, r.stderr, want)
	}
}

func TestReplayIntoAnotherStream(t *testing.T) {
	isolate(t)
	b := newBus(t)
	if _, err := b.js.CreateStream(testContext(t), jetstream.StreamConfig{Name: "REHEARSAL", Subjects: []string{"rehearsal.>"}}); err != nil {
		t.Fatal(err)
	}
	b.publish(t, &eventspb.VolumeCreated{VolumeId: "vol-1", BucketName: "b1"})
	r := run(t, "replay", "--nats-url", b.url, "--to-prefix", "rehearsal.one", "--to-stream", "REHEARSAL")
	if r.code != ExitOK || !strings.Contains(r.stdout, "1 stored") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := storedMessages(t, b.js, "REHEARSAL"); len(got) != 1 || got[0].Subject != "rehearsal.one.volume.created" {
		t.Fatalf("REHEARSAL holds %v", got)
	}
	t.Run("a prefix that no stream stores stops the replay", func(t *testing.T) {
		r := run(t, "replay", "--nats-url", b.url, "--to-prefix", "nowhere", "--to-stream", "REHEARSAL")
		if r.code != ExitFailure || !strings.Contains(r.stderr, "replay stopped at sequence 1") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}
