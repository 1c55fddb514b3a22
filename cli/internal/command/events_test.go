package command

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

// Pods of the story.
const (
	uidWeb   = "0b5e7c2a-1111-4c1d-9a7e-5f3d2c1b0a01" // default/web-0 on node-1: mounted
	uidStuck = "0b5e7c2a-2222-4c1d-9a7e-5f3d2c1b0a02" // shop/stuck-0 on node-2: assigned, never published
	uidBad   = "0b5e7c2a-3333-4c1d-9a7e-5f3d2c1b0a03" // default/bad-0 on node-1: mount failed
)

var (
	mpWeb   = mppod.Name(uidWeb, "pv-a")
	mpStuck = mppod.Name(uidStuck, "pv-b")
	mpBad   = mppod.Name(uidBad, "pv-c")
)

// story is what newStory stored: the sequence of each step.
type story struct {
	created, webScheduled, webAssigned, webPublished            uint64
	stuckScheduled, stuckAssigned, badScheduled, badAssigned    uint64
	badFailed, malformed, oversized, unknown, wrongNode, needsU uint64
}

// newStory publishes three pods' mount paths and four messages that are not valid events.
func newStory(t *testing.T, b *testBus) story {
	t.Helper()
	var s story
	s.created = b.publish(t, &eventspb.VolumeCreated{VolumeId: "vol-a", BucketName: "bucket-a", RequestName: "pv-a"})
	s.webScheduled = b.publish(t, &eventspb.WorkloadScheduled{Node: "node-1", PodNamespace: "default", PodName: "web-0",
		PodUid: uidWeb, Volumes: []*eventspb.VolumeRef{{PvName: "pv-a", VolumeId: "vol-a"}}})
	s.stuckScheduled = b.publish(t, &eventspb.WorkloadScheduled{Node: "node-2", PodNamespace: "shop", PodName: "stuck-0",
		PodUid: uidStuck, Volumes: []*eventspb.VolumeRef{{PvName: "pv-b", VolumeId: "vol-b"}}})
	s.webAssigned = b.publish(t, &eventspb.AttachmentAssigned{Node: "node-1", PvName: "pv-a", VolumeId: "vol-a",
		WorkloadPodUid: uidWeb, WorkloadNamespace: "default", WorkloadName: "web-0", AttachmentName: "s3pa-a",
		MountpointPodName: mpWeb})
	s.malformed = b.publishRaw(t, "s3csi.events.attachment.assigned.node-1", []byte(`{"specversion":`))
	s.stuckAssigned = b.publish(t, &eventspb.AttachmentAssigned{Node: "node-2", PvName: "pv-b", VolumeId: "vol-b",
		WorkloadPodUid: uidStuck, WorkloadNamespace: "shop", WorkloadName: "stuck-0", AttachmentName: "s3pa-b",
		MountpointPodName: mpStuck})
	s.webPublished = b.publish(t, &eventspb.VolumePublished{Node: "node-1", VolumeId: "vol-a", PvName: "pv-a",
		WorkloadPodUid: uidWeb, MountpointPodName: mpWeb, TargetPath: "/var/lib/kubelet/pods/" + uidWeb + "/v", DurationMs: 812})
	s.oversized = b.publishRaw(t, "s3csi.events.volume.published.node-1", oversizedEvent(t))
	s.unknown = b.publishRaw(t, "s3csi.events.volume.resized.node-1", unknownTypeEvent(t))
	s.badScheduled = b.publish(t, &eventspb.WorkloadScheduled{Node: "node-1", PodNamespace: "default", PodName: "bad-0",
		PodUid: uidBad, Volumes: []*eventspb.VolumeRef{{PvName: "pv-c", VolumeId: "vol-c"}}})
	s.badAssigned = b.publish(t, &eventspb.AttachmentAssigned{Node: "node-1", PvName: "pv-c", VolumeId: "vol-c",
		WorkloadPodUid: uidBad, WorkloadNamespace: "default", WorkloadName: "bad-0", AttachmentName: "s3pa-c",
		MountpointPodName: mpBad})
	// A valid event about node-2 stored on node-1's subject.
	s.wrongNode = b.publishRaw(t, "s3csi.events.mountpoint.needs-unmount.node-1", encoded(t,
		&eventspb.MountpointNeedsUnmount{Node: "node-2", MountpointPodName: mpStuck, Reason: "forged"}))
	s.badFailed = b.publish(t, &eventspb.MountFailed{Node: "node-1", VolumeId: "vol-c", PvName: "pv-c",
		MountpointPodName: mpBad, WorkloadPodUids: []string{uidBad}, Reason: "MounterError",
		Message: "bucket \"c\" does not exist\x1b[31m"})
	s.needsU = b.publish(t, &eventspb.MountpointNeedsUnmount{Node: "node-1", MountpointPodName: mpBad, PvName: "pv-c", Reason: "NoWorkload"})
	return s
}

func encoded(t *testing.T, p proto.Message) []byte {
	t.Helper()
	e, err := events.New("/s3csi/cli-test", "", p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// oversizedEvent is a well-formed event larger than events.MaxEventSize (the stream takes up
// to MaxEventSize plus room for headers).
func oversizedEvent(t *testing.T) []byte {
	t.Helper()
	b := encoded(t, &eventspb.VolumePublished{Node: "node-1", VolumeId: "vol-a", PvName: "pv-a",
		WorkloadPodUid: uidWeb, TargetPath: "/" + strings.Repeat("x", events.MaxEventSize)})
	if len(b) <= events.MaxEventSize {
		t.Fatalf("oversized event has %d bytes", len(b))
	}
	return b[:events.MaxEventSize+100]
}

// unknownTypeEvent is a CloudEvent of a type outside the catalog.
func unknownTypeEvent(t *testing.T) []byte {
	t.Helper()
	return []byte(`{"specversion":"1.0","id":"x1","source":"/elsewhere","type":"io.s3csi.volume.resized.v1",` +
		`"datacontenttype":"application/json","data":{"node":"node-1"}}`)
}

func TestEventsTableShowsTheHistoryInOrderAndInvalidMessages(t *testing.T) {
	isolate(t)
	b := newBus(t)
	s := newStory(t, b)
	r := run(t, "events", "--nats-url", b.url)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if !strings.HasPrefix(lines[0], "SEQ") || !strings.Contains(lines[0], "DETAILS") {
		t.Fatalf("no header: %q", lines[0])
	}
	if got, want := len(lines)-1, int(s.needsU); got != want {
		t.Fatalf("%d rows, want %d:\n%s", got, want, r.stdout)
	}
	for i, line := range lines[1:] {
		if !strings.HasPrefix(line, fmt.Sprintf("%d ", i+1)) {
			t.Errorf("row %d is not sequence %d: %q", i+1, i+1, line)
		}
	}
	for _, seq := range []uint64{s.malformed, s.oversized, s.unknown, s.wrongNode} {
		row := lines[seq]
		if !strings.Contains(row, "INVALID") || !strings.Contains(row, "(skipped)") {
			t.Errorf("sequence %d is not shown as invalid: %q", seq, row)
		}
	}
	for _, want := range []string{"exceed the limit", "unknown event type", "arrived on s3csi.events.mountpoint.needs-unmount.node-1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output does not say %q", want)
		}
	}
	if row := lines[s.webAssigned]; !strings.Contains(row, "attachment.assigned") || !strings.Contains(row, "default/web-0") ||
		!strings.Contains(row, "mountpointPod="+mpWeb) {
		t.Errorf("row of attachment.assigned: %q", row)
	}
	if strings.Contains(r.stdout, "\x1b") {
		t.Error("a control character of a payload reached the terminal")
	}
	t.Logf("kubectl-s3csi events:\n%s", r.stdout)
}

func TestEventsSelections(t *testing.T) {
	isolate(t)
	b := newBus(t)
	s := newStory(t, b)
	tests := []struct {
		name string
		args []string
		want []uint64
	}{
		{name: "a node: its events and the invalid messages on its subjects, not the cluster-scoped ones",
			args: []string{"--node", "node-2"}, want: []uint64{s.stuckScheduled, s.stuckAssigned}},
		{name: "a pod by namespace/name: its mount path and its Mountpoint Pod's events",
			args: []string{"--pod", "default/bad-0"}, want: []uint64{s.malformed, s.oversized, s.unknown,
				s.badScheduled, s.badAssigned, s.wrongNode, s.badFailed, s.needsU}},
		{name: "a pod by UID", args: []string{"--pod", uidWeb, "--type", "attachment.assigned,volume.published"},
			want: []uint64{s.webAssigned, s.malformed, s.webPublished, s.oversized}},
		{name: "a pod by name in -n", args: []string{"--pod", "stuck-0", "-n", "shop", "--node", "node-2"},
			want: []uint64{s.stuckScheduled, s.stuckAssigned}},
		{name: "a PersistentVolume, also through its volume handle",
			args: []string{"--pv", "pv-a", "--type", "volume.created,workload.scheduled,volume.published"},
			want: []uint64{s.created, s.webScheduled, s.webPublished, s.oversized}},
		{name: "types by full and short name",
			args: []string{"--type", "io.s3csi.mount.failed.v1", "--type", "mountpoint.needs-unmount"},
			want: []uint64{s.wrongNode, s.badFailed, s.needsU}},
		{name: "a range of sequences", args: []string{"--from-seq", "4", "--until-seq", "6"}, want: []uint64{4, 5, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, append([]string{"events", "--nats-url", b.url, "-o", "json"}, tt.args...)...)
			if r.code != ExitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got := seqs(jsonRecords(t, r.stdout)); !slices.Equal(got, tt.want) {
				t.Errorf("sequences %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEventsSince(t *testing.T) {
	isolate(t)
	b := newBus(t)
	b.publish(t, &eventspb.VolumeCreated{VolumeId: "vol-old", BucketName: "old"})
	time.Sleep(2500 * time.Millisecond) // the stored time is the server's clock: no other way to age an event
	start := time.Now()
	recent := b.publish(t, &eventspb.VolumeCreated{VolumeId: "vol-new", BucketName: "new"})
	// One second of margin each way: the old event is 2.5 s older than the new one.
	since := time.Since(start) + time.Second
	r := run(t, "events", "--nats-url", b.url, "-o", "json", "--since", since.String())
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got := seqs(jsonRecords(t, r.stdout)); !slices.Equal(got, []uint64{recent}) {
		t.Errorf("--since %s read %v, want [%d]", since, got, recent)
	}
}

func TestEventsOutputs(t *testing.T) {
	isolate(t)
	b := newBus(t)
	s := newStory(t, b)
	t.Run("JSON carries the event as stored and why a message is invalid", func(t *testing.T) {
		r := run(t, "events", "--nats-url", b.url, "-o", "json", "--from-seq", fmt.Sprint(s.webAssigned), "--until-seq", fmt.Sprint(s.malformed))
		recs := jsonRecords(t, r.stdout)
		if len(recs) != 2 {
			t.Fatalf("%d records, want 2:\n%s", len(recs), r.stdout)
		}
		ev, _ := recs[0]["event"].(map[string]any)
		if recs[0]["type"] != "attachment.assigned" || ev["type"] != string(events.TypeAttachmentAssigned) || recs[0]["id"] != ev["id"] {
			t.Errorf("record of a valid event: %v", recs[0])
		}
		if recs[1]["invalid"] == nil || recs[1]["event"] != nil {
			t.Errorf("record of a malformed message: %v", recs[1])
		}
	})
	t.Run("YAML is one document per record", func(t *testing.T) {
		r := run(t, "events", "--nats-url", b.url, "-o", "yaml", "--type", "volume.created")
		docs := strings.Split(strings.TrimPrefix(r.stdout, "---\n"), "\n---\n")
		if len(docs) != 1 {
			t.Fatalf("%d documents, want 1:\n%s", len(docs), r.stdout)
		}
		var rec map[string]any
		if err := yaml.Unmarshal([]byte(docs[0]), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["type"] != "volume.created" || rec["seq"] != float64(s.created) {
			t.Errorf("record %v", rec)
		}
	})
}

func TestEventsWhyIsMyPodStuck(t *testing.T) {
	isolate(t)
	b := newBus(t)
	newStory(t, b)
	tests := []struct {
		pod  string
		want []string
	}{
		{pod: "shop/stuck-0", want: []string{"Pod shop/stuck-0: scheduled on node node-2",
			"pv-b: NOT MOUNTED: assigned to Mountpoint Pod " + mpStuck, "node-agent's logs on node node-2",
			"kubectl -n mount-s3 get pod " + mpStuck}},
		{pod: "default/web-0", want: []string{"pv-a: mounted at", "through Mountpoint Pod " + mpWeb, "NodePublishVolume took 812ms"}},
		{pod: "default/bad-0", want: []string{"pv-c: NOT MOUNTED: the mount failed", "MounterError: bucket \"c\" does not exist",
			"read the logs of pod mount-s3/" + mpBad}},
		{pod: "default/nobody", want: []string{"No event about pod default/nobody"}},
	}
	for _, tt := range tests {
		t.Run(tt.pod, func(t *testing.T) {
			r := run(t, "events", "--nats-url", b.url, "--pod", tt.pod)
			if r.code != ExitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			for _, want := range tt.want {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("output does not say %q:\n%s", want, r.stdout)
				}
			}
			if !strings.Contains(r.stdout, "+WAIT") {
				t.Errorf("the pod view has no +WAIT column:\n%s", r.stdout)
			}
			t.Logf("kubectl-s3csi events --pod %s:\n%s", tt.pod, r.stdout)
		})
	}
}

func TestEventsFollow(t *testing.T) {
	isolate(t)
	b := newBus(t)
	first := b.publish(t, &eventspb.VolumeCreated{VolumeId: "vol-1", BucketName: "b1"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut safeBuffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, []string{"events", "--nats-url", b.url, "-f"}, &out, &errOut) }()
	testenv.Eventually(t, 20*time.Second, "the history to be printed", func() bool {
		return strings.Contains(out.String(), fmt.Sprintf("\n%d ", first))
	})
	later := b.publish(t, &eventspb.VolumeDeleted{VolumeId: "vol-1", BucketName: "b1"})
	bad := b.publishRaw(t, events.TypeVolumeDeleted.Stem(), []byte("garbage"))
	testenv.Eventually(t, 20*time.Second, "the later events to be printed", func() bool {
		return strings.Contains(out.String(), fmt.Sprintf("\n%d ", later)) && strings.Contains(out.String(), fmt.Sprintf("\n%d ", bad))
	})
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("exit %d after the interrupt: %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the follow did not end after its context")
	}
	if n := strings.Count(out.String(), "SEQ"); n != 1 {
		t.Errorf("%d headers, want 1:\n%s", n, out.String())
	}
}
