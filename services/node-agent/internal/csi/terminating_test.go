package csi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
	"github.com/s3csi/s3csi/shared/testenv/testfs"

	"github.com/s3csi/s3csi/services/node-agent/internal/cleanup"
)

// terminate deletes the Mountpoint Pod as a drain or an operator does (it is scheduled and
// Running, so it stays Terminating for its grace period), sends its mounter the SIGTERM
// kubelet sends, and waits until the node's pod watch sees the deletion.
func (n *node) terminate(ctx context.Context, mp *mountpointPod) {
	n.t.Helper()
	if err := apiServer.Client.Delete(ctx, mp.pod); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { _ = apiServer.Client.Delete(context.WithoutCancel(ctx), mp.pod, client.GracePeriodSeconds(0)) })
	if err := mp.proc.Process.Signal(syscall.SIGTERM); err != nil {
		n.t.Fatal(err)
	}
	testenv.Eventually(n.t, 15*time.Second, "the Terminating Mountpoint Pod in the pod cache", func() bool {
		p, _ := n.pods.Get(ctx, mp.pod.Name)
		return p != nil && p.DeletionTimestamp != nil
	})
}

// runCleaner runs a cleaner that shares the node's locks and watches its Mountpoint Pods, as
// the node-agent wires them, with no periodic sweep to help.
func (n *node) runCleaner(ctx context.Context) *cleanup.Cleaner {
	n.t.Helper()
	cleaner := cleanup.New(n.kubelet.Root, n.pods, n.locks(), time.Hour, nil)
	n.pods.Observe(cleaner.Observe)
	cctx, cancel := context.WithCancel(logr.NewContext(ctx, funcr.New(n.logs.add, funcr.Options{Verbosity: 4})))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cleaner.Start(cctx)
	}()
	n.t.Cleanup(func() {
		cancel()
		<-done
	})
	return cleaner
}

// exitStatus waits for the mounter's exit and leaves it for the harness's cleanup.
func (mp *mountpointPod) exitStatus(ctx context.Context, t *testing.T) error {
	t.Helper()
	select {
	case err := <-mp.exited:
		mp.exited <- err
		return err
	case <-ctx.Done():
		t.Fatal("the mounter did not exit")
		return nil
	}
}

// TestTerminatingMountpointPodServesItsBindsUntilTheLastGoes: a Mountpoint Pod deleted while
// workloads read through it keeps serving them; a workload already recorded on it still gets
// a bind of the serving source; the cleanup leaves the source alone while a bind remains and
// unmounts it after the last one, and the mounter then exits 0.
func TestTerminatingMountpointPodServesItsBindsUntilTheLastGoes(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pv, uidA, uidB := "pv-terminating", string(uuid.NewUUID()), string(uuid.NewUUID())
	mpName := mppod.Name(uidA, pv)
	mp := n.createMountpointPod(mpName)
	s3pa := n.assign(pv, "vol", uidA, mpName)
	targetA, targetB := n.target(uuidOf(uidA), pv), n.target(uuidOf(uidB), pv)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", targetA, "bucket-b", uuidOf(uidA))); err != nil {
		t.Fatal(err)
	}
	n.addWorkload(s3pa, mpName, uidB)
	cleaner := n.runCleaner(ctx)

	n.terminate(ctx, mp)
	if got := readFile(t, filepath.Join(targetA, testfs.HelloName)); got != testfs.HelloContent {
		t.Fatalf("read through the bind of a Terminating Mountpoint Pod = %q", got)
	}
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", targetB, "bucket-b", uuidOf(uidB))); err != nil {
		t.Fatalf("publish of a workload recorded on the Terminating Mountpoint Pod while its source serves: %v", err)
	}
	if got, err := cleaner.Clean(ctx, mpName); err != nil || got != cleanup.OutcomeWaiting {
		t.Fatalf("clean of a Terminating Mountpoint Pod with binds: %q, %v; want waiting", got, err)
	}
	for _, target := range []string{targetA, targetB} {
		if got := readFile(t, filepath.Join(target, testfs.HelloName)); got != testfs.HelloContent {
			t.Fatalf("read through %s after SIGTERM = %q", target, got)
		}
		if _, err := n.client.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: target}); err != nil {
			t.Fatal(err)
		}
	}
	// The pod-reconciler marks it needs-unmount once the workloads are gone; the event, the
	// watch or the sweep triggers this.
	cleaner.Trigger(mpName)
	testenv.Eventually(t, 15*time.Second, "the source dir removed", func() bool {
		_, err := os.Stat(n.kubelet.SourceDir(mpName))
		return errors.Is(err, os.ErrNotExist)
	})
	if err := mp.exitStatus(ctx, t); err != nil {
		t.Fatalf("the mounter exited with %v after the last bind went, want 0", err)
	}
}

// TestTerminatingMountpointPodWithoutBindsIsReleasedByTheWatch: nothing but the pod's deletion
// (no needs-unmount event, no sweep) unmounts a source nobody binds, and the mounter exits 0
// at once instead of serving through its grace period.
func TestTerminatingMountpointPodWithoutBindsIsReleasedByTheWatch(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pv, uid := "pv-released", string(uuid.NewUUID())
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
	n.runCleaner(ctx)
	n.terminate(ctx, mp)
	if err := mp.exitStatus(ctx, t); err != nil {
		t.Fatalf("the mounter exited with %v, want 0", err)
	}
	testenv.Eventually(t, 15*time.Second, "the source dir removed", func() bool {
		_, err := os.Stat(n.kubelet.SourceDir(mpName))
		return errors.Is(err, os.ErrNotExist)
	})
}

// TestTerminatingMountpointPodTakesNoNewMount: a workload recorded on a Mountpoint Pod that is
// being deleted before its source was mounted is told to retry; the replacement serves it.
func TestTerminatingMountpointPodTakesNoNewMount(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pv, uid := "pv-no-new-mount", string(uuid.NewUUID())
	mpName := mppod.Name(uid, pv)
	mp := n.createMountpointPod(mpName)
	n.assign(pv, "vol", uid, mpName)
	if err := apiServer.Client.Delete(ctx, mp.pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = apiServer.Client.Delete(context.WithoutCancel(ctx), mp.pod, client.GracePeriodSeconds(0)) })
	testenv.Eventually(t, 15*time.Second, "the Terminating Mountpoint Pod in the pod cache", func() bool {
		p, _ := n.pods.Get(ctx, mpName)
		return p != nil && p.DeletionTimestamp != nil
	})
	target := n.target(uuidOf(uid), pv)
	_, err := n.client.NodePublishVolume(ctx, publishRequest("vol", target, "bucket-b", uuidOf(uid)))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "terminating") {
		t.Fatalf("publish on a Terminating Mountpoint Pod without a source: %v, want UNAVAILABLE naming it terminating", err)
	}
}
