package events_test

import (
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
)

// testSource is the CloudEvents source of events built by tests.
const testSource = "/s3csi/events-test"

// Names in test payloads: UIDs are UUIDs and Mountpoint Pod names have mppod.Name's shape, as
// Decode requires.
const (
	uidWeb0 = "3f0c6a2e-58b1-4d2f-9a4e-0c1b2d3e4f50"
	uidWeb1 = "3f0c6a2e-58b1-4d2f-9a4e-0c1b2d3e4f51"
	uidMP   = "7d9e1f20-3a4b-4c5d-8e6f-708192a3b4c5"
	mpName  = "mp-8e132d46ba9cac50eb8bfaf954f50c2d5ad1a4f7fb9032c87e2e38f7"
)

// payload returns a valid payload of type t about node (ignored for cluster-scoped types),
// with every field set so round trips cover them all.
func payload(t events.Type, node string) proto.Message {
	switch t {
	case events.TypeWorkloadScheduled:
		return &eventspb.WorkloadScheduled{Node: node, PodNamespace: "default", PodName: "web-0",
			PodUid: uidWeb0, Volumes: []*eventspb.VolumeRef{{PvName: "pv-a", VolumeId: "vol-a"}}}
	case events.TypeAttachmentAssigned:
		return &eventspb.AttachmentAssigned{Node: node, PvName: "pv-a", VolumeId: "vol-a",
			WorkloadPodUid: uidWeb0, WorkloadNamespace: "default", WorkloadName: "web-0",
			AttachmentName: "s3pa-abc", MountpointPodName: mpName, ResourceVersion: "42"}
	case events.TypeMountpointNeedsUnmount:
		return &eventspb.MountpointNeedsUnmount{Node: node, MountpointPodName: mpName,
			MountpointPodUid: uidMP, PvName: "pv-a", Reason: "NoWorkload"}
	case events.TypeVolumePublished:
		return &eventspb.VolumePublished{Node: node, VolumeId: "vol-a", PvName: "pv-a",
			WorkloadPodUid: uidWeb0, MountpointPodName: mpName,
			TargetPath: "/var/lib/kubelet/pods/" + uidWeb0 + "/volumes/kubernetes.io~csi/pv-a/mount",
			ReadOnly:   true, SharedSource: true, DurationMs: 1234}
	case events.TypeVolumeUnpublished:
		return &eventspb.VolumeUnpublished{Node: node, VolumeId: "vol-a", WorkloadPodUid: uidWeb0,
			TargetPath: "/var/lib/kubelet/pods/" + uidWeb0 + "/volumes/kubernetes.io~csi/pv-a/mount"}
	case events.TypeMountFailed:
		return &eventspb.MountFailed{Node: node, VolumeId: "vol-a", PvName: "pv-a",
			MountpointPodName: mpName, WorkloadPodUids: []string{uidWeb0, uidWeb1},
			Reason: "MounterError", Message: "mount-s3 exited 1: read mount.err in pod mount-s3/" + mpName}
	case events.TypeVolumeCreated:
		return &eventspb.VolumeCreated{VolumeId: "vol-a", BucketName: "bucket-a", RequestName: "pvc-123"}
	case events.TypeVolumeDeleted:
		return &eventspb.VolumeDeleted{VolumeId: "vol-a", BucketName: "bucket-a", BucketDeleted: true, Reason: "Deleted"}
	case events.TypeAttachmentCleaned:
		return &eventspb.AttachmentCleaned{Node: node, AttachmentName: "s3pa-abc",
			WorkloadPodUid: uidWeb0, MountpointPodName: mpName, Reason: "WorkloadGone"}
	}
	panic("payload: unknown type " + string(t))
}

// mustNew builds an event with a random id, failing the test on error.
func mustNew(t testing.TB, p proto.Message) event.Event {
	t.Helper()
	e, err := events.New(testSource, "", p)
	if err != nil {
		t.Fatalf("build event: %v", err)
	}
	return e
}

// goldenEvent is the event of type t with a fixed id, time and node, as in testdata/.
func goldenEvent(t testing.TB, typ events.Type) event.Event {
	t.Helper()
	e, err := events.New(testSource, events.DeterministicID(typ, "golden"), payload(typ, "node-a.example.com"))
	if err != nil {
		t.Fatalf("build golden event: %v", err)
	}
	e.SetTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	return e
}
