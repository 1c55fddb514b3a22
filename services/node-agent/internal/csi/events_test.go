package csi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/node-agent/internal/notify"
)

// bus is an embedded JetStream server with this node's consumer feeding the node's waiter.
type bus struct {
	nats *testenv.NATS
	nc   *nats.Conn
	pub  *events.Publisher
}

func startBus(t testing.TB, n *node) *bus {
	t.Helper()
	srv := testenv.StartNATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	nc, err := events.Connect(ctx, srv.URL(), "test", logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	h := &notify.Handler{Node: n.name, Waker: n.waiter}
	consumer, err := events.NewConsumer(js, notify.ConsumerConfig(n.name), h.Handle, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = consumer.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		nc.Close()
	})
	return &bus{nats: srv, nc: nc, pub: events.NewPublisher(js, events.PublisherOptions{})}
}

func (b *bus) assigned(t testing.TB, node, pv, podUID, mpName string) {
	t.Helper()
	ev, err := events.New("/test/pod-reconciler", "", &eventspb.AttachmentAssigned{
		Node: node, PvName: pv, VolumeId: "vol", WorkloadPodUid: podUID, AttachmentName: "s3pa", MountpointPodName: mpName,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pub.Publish(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
}

// publishAsync starts a NodePublishVolume and returns its result channel.
func publishAsync(ctx context.Context, n *node, volumeID, target string, uid string) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := n.client.NodePublishVolume(ctx, publishRequest(volumeID, target, "bucket-b", uuidOf(uid)))
		errc <- err
	}()
	return errc
}

func TestPublishWakesOnTheAssignedEventWithoutWaitingForTheFallback(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: time.Hour})
	b := startBus(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pv, first, second := "pv-event", string(uuid.NewUUID()), string(uuid.NewUUID())
	mpName := mppod.Name(first, pv)
	n.createMountpointPod(mpName)
	s3pa := n.assign(pv, "vol", first, mpName)
	errc := publishAsync(ctx, n, "vol", n.target(uuidOf(second), pv), second)
	time.Sleep(300 * time.Millisecond) // the waiter has read once and found nothing
	n.addWorkload(s3pa, mpName, second)
	b.assigned(t, n.name, pv, second, mpName)
	if err := <-errc; err != nil {
		t.Fatalf("publish woken by the event: %v (the fallback is an hour)", err)
	}
}

func TestPublishFallsBackToPeriodicRereadsWhenNATSIsDown(t *testing.T) {
	n := startNode(t, nodeOptions{}) // the default 2 s fallback
	b := startBus(t, n)
	b.nats.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pv, first := "pv-nonats", string(uuid.NewUUID())
	mpName := mppod.Name(first, pv)
	n.createMountpointPod(mpName)
	errc := publishAsync(ctx, n, "vol", n.target(uuidOf(first), pv), first)
	time.Sleep(300 * time.Millisecond)
	n.assign(pv, "vol", first, mpName)
	if err := <-errc; err != nil {
		t.Fatalf("publish with NATS down: %v", err)
	}
}

func TestEventsForAnotherNodeOrForgedCauseNothing(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: time.Hour})
	b := startBus(t, n)
	pv, uid := "pv-forged", string(uuid.NewUUID())
	mpName := mppod.Name(uid, pv)
	n.createMountpointPod(mpName)
	other := string(uuid.NewUUID())
	n.assign(pv, "vol", other, mpName) // the attachment does not record uid

	// An event about another node, and a payload naming another node forged onto this
	// node's subject, and a well-formed event for this node the API server does not back.
	b.assigned(t, "other-node", pv, uid, mpName)
	forged, err := events.New("/forger", "", &eventspb.AttachmentAssigned{
		Node: "other-node", PvName: pv, WorkloadPodUid: uid, AttachmentName: "x", MountpointPodName: mpName,
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	subject, _ := events.Subject(events.TypeAttachmentAssigned, n.name)
	if err := b.nc.Publish(subject, raw); err != nil {
		t.Fatal(err)
	}
	b.assigned(t, n.name, pv, uid, mpName)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	target := n.target(uuidOf(uid), pv)
	_, err = n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", uuidOf(uid)))
	if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Unavailable {
		t.Fatalf("publish for an unassigned pod: %v, want a retryable failure", err)
	}
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{target, n.kubelet.SourceDir(mpName)} {
		if _, ok := table.Lookup(p); ok {
			t.Fatalf("%s was mounted on the strength of an event", p)
		}
	}
}
