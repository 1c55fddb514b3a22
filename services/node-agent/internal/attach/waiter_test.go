package attach

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// fakeReader serves a settable list of attachments; a fast stand-in for the API server, whose
// real behavior (field selectors) is covered by the node service's tests.
type fakeReader struct {
	mu    sync.Mutex
	items []s3csiv2.MountpointS3PodAttachment
	reads int
}

func (f *fakeReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	list.(*s3csiv2.MountpointS3PodAttachmentList).Items = append([]s3csiv2.MountpointS3PodAttachment(nil), f.items...)
	return nil
}

func (f *fakeReader) set(items ...s3csiv2.MountpointS3PodAttachment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = items
}

type counter struct {
	mu              sync.Mutex
	event, fallback int
}

func (c *counter) Wakeup(byEvent bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if byEvent {
		c.event++
	} else {
		c.fallback++
	}
}

func attachment(node, pv, volumeID, mp, uid string) s3csiv2.MountpointS3PodAttachment {
	return s3csiv2.MountpointS3PodAttachment{Spec: s3csiv2.MountpointS3PodAttachmentSpec{
		NodeName: node, PersistentVolumeName: pv, VolumeID: volumeID,
		MountpointS3PodAttachments: map[string][]s3csiv2.WorkloadAttachment{mp: {{WorkloadPodUID: uid, AttachmentTime: metav1.Now()}}},
	}}
}

func TestWaitWakesOnNotifyAndIgnoresOtherNodesAndVolumes(t *testing.T) {
	r := &fakeReader{}
	rec := &counter{}
	w := NewWaiter("node-a", r, time.Hour, rec)
	key := Key{PodUID: "uid-1", PVName: "pv"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan *Assignment, 1)
	go func() {
		a, _ := w.Wait(ctx, key, "vol")
		done <- a
	}()
	// Records on another node, or with another volume id, are never taken.
	r.set(attachment("node-b", "pv", "vol", "mp-b", "uid-1"), attachment("node-a", "pv", "other", "mp-x", "uid-1"))
	w.Notify(key)
	select {
	case a := <-done:
		t.Fatalf("took %v from a record of another node or volume", a)
	case <-time.After(200 * time.Millisecond):
	}
	r.set(attachment("node-a", "pv", "vol", "mp-a", "uid-1"))
	w.Notify(Key{PodUID: "uid-2", PVName: "pv"}) // another key wakes nobody
	w.Notify(key)
	select {
	case a := <-done:
		if a == nil || a.MountpointPod != "mp-a" {
			t.Fatalf("assignment = %+v, want mp-a", a)
		}
	case <-ctx.Done():
		t.Fatal("Notify did not wake the waiter")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.event < 1 || rec.fallback != 0 {
		t.Fatalf("wake-ups event=%d fallback=%d, want event wake-ups only", rec.event, rec.fallback)
	}
}

func TestWaitFallsBackToPeriodicReadsAndEndsWithTheContext(t *testing.T) {
	r := &fakeReader{}
	rec := &counter{}
	w := NewWaiter("node-a", r, 20*time.Millisecond, rec)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := w.Wait(ctx, Key{PodUID: "uid", PVName: "pv"}, "vol")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.fallback < 3 || rec.event != 0 {
		t.Fatalf("fallback re-reads %d, event %d; want several fallback re-reads", rec.fallback, rec.event)
	}
	if len(w.waiters) != 0 {
		t.Fatal("a finished wait stayed registered")
	}
}
