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

// payload returns a valid payload of type t about node (ignored for cluster-scoped types),
// with every field set so round trips cover them all.
func payload(t events.Type, node string) proto.Message {
	switch t {
	case events.TypeWorkloadScheduled:
		return &eventspb.WorkloadScheduled{Node: node, PodNamespace: "default", PodName: "web-0",
			PodUid: "uid-web-0", Volumes: []*eventspb.VolumeRef{{PvName: "pv-a", VolumeId: "vol-a"}}}
	case events.TypeAttachmentAssigned:
		return &eventspb.AttachmentAssigned{Node: node, PvName: "pv-a", VolumeId: "vol-a",
			WorkloadPodUid: "uid-web-0", WorkloadNamespace: "default", WorkloadName: "web-0",
			AttachmentName: "s3pa-abc", MountpointPodName: "mp-abc", ResourceVersion: "42"}
	case events.TypeMountpointNeedsUnmount:
		return &eventspb.MountpointNeedsUnmount{Node: node, MountpointPodName: "mp-abc",
			MountpointPodUid: "uid-mp-abc", PvName: "pv-a", Reason: "NoWorkload"}
	case events.TypeVolumePublished:
		return &eventspb.VolumePublished{Node: node, VolumeId: "vol-a", PvName: "pv-a",
			WorkloadPodUid: "uid-web-0", MountpointPodName: "mp-abc",
			TargetPath: "/var/lib/kubelet/pods/uid-web-0/volumes/kubernetes.io~csi/pv-a/mount",
			ReadOnly:   true, SharedSource: true, DurationMs: 1234}
	case events.TypeVolumeUnpublished:
		return &eventspb.VolumeUnpublished{Node: node, VolumeId: "vol-a", WorkloadPodUid: "uid-web-0",
			TargetPath: "/var/lib/kubelet/pods/uid-web-0/volumes/kubernetes.io~csi/pv-a/mount"}
	case events.TypeMountFailed:
		return &eventspb.MountFailed{Node: node, VolumeId: "vol-a", PvName: "pv-a",
			MountpointPodName: "mp-abc", WorkloadPodUids: []string{"uid-web-0", "uid-web-1"},
			Reason: "MounterError", Message: "mount-s3 exited 1: read mount.err in pod mount-s3/mp-abc"}
	case events.TypeVolumeCreated:
		return &eventspb.VolumeCreated{VolumeId: "vol-a", BucketName: "bucket-a", RequestName: "pvc-123"}
	case events.TypeVolumeDeleted:
		return &eventspb.VolumeDeleted{VolumeId: "vol-a", BucketName: "bucket-a", BucketDeleted: true}
	case events.TypeAttachmentCleaned:
		return &eventspb.AttachmentCleaned{Node: node, AttachmentName: "s3pa-abc",
			WorkloadPodUid: "uid-web-0", MountpointPodName: "mp-abc", Reason: "WorkloadGone"}
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
