package csi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/keymutex"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
	"github.com/s3csi/s3csi/shared/testenv/testfs"

	"github.com/s3csi/s3csi/services/node-agent/internal/cleanup"
)

func TestNeedsUnmountCleansTheSourceOnlyOnceNoWorkloadBindsIt(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, uid := "pv-cleanup", string(uuid.NewUUID())
	mpName := mppod.Name(uid, pv)
	mp := n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	target := n.target(uuidOf(uid), pv)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", uuidOf(uid))); err != nil {
		t.Fatal(err)
	}
	source := n.kubelet.SourceDir(mpName)
	cleaner := cleanup.New(n.kubelet.Root, n.pods, &keymutex.Mutex{}, time.Hour, nil)

	if got, err := cleaner.Clean(ctx, mpName); err != nil || got != cleanup.OutcomeKept {
		t.Fatalf("clean of a serving pod: %q, %v; want kept", got, err)
	}
	mp.pod.Annotations = map[string]string{mppod.AnnotationNeedsUnmount: "true"}
	if err := apiServer.Client.Update(ctx, mp.pod); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "the needs-unmount annotation in the pod cache", func() bool {
		p, _ := n.pods.Get(ctx, mpName)
		return p != nil && p.Annotations[mppod.AnnotationNeedsUnmount] != ""
	})
	if got, err := cleaner.Clean(ctx, mpName); err != nil || got != cleanup.OutcomeWaiting {
		t.Fatalf("clean of a bound source: %q, %v; want waiting", got, err)
	}
	if got := readFile(t, filepath.Join(target, testfs.HelloName)); got != testfs.HelloContent {
		t.Fatal("the workload lost its mount while still bound")
	}
	if _, err := n.client.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: target}); err != nil {
		t.Fatal(err)
	}

	// The event path: a trigger, handled by the running cleaner.
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cleaner.Start(logr.NewContext(cctx, funcr.New(n.logs.add, funcr.Options{Verbosity: 4})))
	}()
	defer func() {
		ccancel()
		<-done
	}()
	cleaner.Trigger(mpName)
	testenv.Eventually(t, 15*time.Second, "the source dir removed", func() bool {
		_, err := os.Stat(source)
		return errors.Is(err, os.ErrNotExist)
	})
	select {
	case err := <-mp.exited:
		if err != nil {
			t.Fatalf("mounter exited with %v after mount.exit, want 0", err)
		}
		mp.exited <- nil
	case <-ctx.Done():
		t.Fatal("mounter did not exit after its source was unmounted")
	}
}

func TestSourcesOfGoneMountpointPodsAreCleaned(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, uid := "pv-gone", string(uuid.NewUUID())
	mpName := mppod.Name(uid, pv)
	mp := n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	target := n.target(uuidOf(uid), pv)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", uuidOf(uid))); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if err := apiServer.Client.Delete(ctx, mp.pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "the pod gone from the cache", func() bool { p, _ := n.pods.Get(ctx, mpName); return p == nil })
	cleanup.New(n.kubelet.Root, n.pods, &keymutex.Mutex{}, time.Hour, nil).Sweep(ctx)
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := table.Lookup(n.kubelet.SourceDir(mpName)); ok {
		t.Fatal("source of a gone pod still mounted")
	}
	if _, err := os.Stat(n.kubelet.SourceDir(mpName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("source dir of a gone pod remains: %v", err)
	}
}

// outcomes is a cleanup.Recorder that passes every outcome on.
type outcomes chan string

func (o outcomes) Cleanup(outcome string) { o <- outcome }

// The reconciler asks for the unmount when the last workload is deleted, before kubelet
// unpublishes it: the source waits for that unbind, and goes right after it, not at the next
// sweep.
func TestASourceWaitingForItsLastBindIsCleanedRightAfterTheUnpublish(t *testing.T) {
	var cleaner *cleanup.Cleaner
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond, unbound: func() { cleaner.Unbound() }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pv, uid := "pv-unbound", string(uuid.NewUUID())
	mpName := mppod.Name(uid, pv)
	mp := n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	target := n.target(uuidOf(uid), pv)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", uuidOf(uid))); err != nil {
		t.Fatal(err)
	}
	rec := make(outcomes, 16)
	cleaner = cleanup.New(n.kubelet.Root, n.pods, &keymutex.Mutex{}, time.Hour, rec)
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cleaner.Start(cctx)
	}()
	defer func() {
		ccancel()
		<-done
	}()

	mp.pod.Annotations = map[string]string{mppod.AnnotationNeedsUnmount: "true"}
	if err := apiServer.Client.Update(ctx, mp.pod); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "the needs-unmount annotation in the pod cache", func() bool {
		p, _ := n.pods.Get(ctx, mpName)
		return p != nil && p.Annotations[mppod.AnnotationNeedsUnmount] != ""
	})
	cleaner.Trigger(mpName)
	if got := <-rec; got != cleanup.OutcomeWaiting {
		t.Fatalf("clean of a bound source: %q, want waiting", got)
	}
	if _, err := n.client.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the source dir removed after the unpublish, with no sweep", func() bool {
		_, err := os.Stat(n.kubelet.SourceDir(mpName))
		return errors.Is(err, os.ErrNotExist)
	})
	if err := <-mp.exited; err != nil {
		t.Fatalf("mounter exited with %v after mount.exit, want 0", err)
	}
	mp.exited <- nil
}
