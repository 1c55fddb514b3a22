package csi_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
	"github.com/s3csi/s3csi/shared/testenv/testfs"

	"github.com/s3csi/s3csi/services/node-agent/internal/cleanup"
	"github.com/s3csi/s3csi/services/node-agent/internal/health"
)

// attrCacheExpiry is longer than the kernel's attribute cache of the test filesystem (go-fuse's
// default, one second): after it, a stat of the mount's root reaches the server.
const attrCacheExpiry = 1500 * time.Millisecond

// stop stops the mounter process (SIGSTOP): its FUSE mounts stay and every request not answered
// from the kernel's caches waits. Cleanup resumes it before the mounts are removed.
func (mp *mountpointPod) stop(t *testing.T) {
	t.Helper()
	if err := mp.proc.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mp.proc.Process.Signal(syscall.SIGCONT) })
	time.Sleep(attrCacheExpiry)
}

// servedVolume is a workload published on a Mountpoint Pod of its own.
type servedVolume struct {
	mpName, target string
	mp             *mountpointPod
	uid            types.UID
}

func publishOnNewMountpointPod(ctx context.Context, t *testing.T, n *node, pv string) servedVolume {
	t.Helper()
	uid := uuid.NewUUID()
	mpName := mppod.Name(string(uid), pv)
	mp, err := n.startMountpointPod(ctx, mpName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.createAttachment(ctx, pv, "vol-"+pv, string(uid), mpName); err != nil {
		t.Fatal(err)
	}
	target := n.target(uid, pv)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol-"+pv, target, "bucket-"+pv, uid)); err != nil {
		t.Fatalf("publish %s: %v", pv, err)
	}
	return servedVolume{mpName: mpName, target: target, mp: mp, uid: uid}
}

// blockedReader starts a process that reads a file through path and blocks there, as a workload
// does when its server stops. Cleanup kills it.
func blockedReader(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command("cat", filepath.Join(path, testfs.HelloName))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	time.Sleep(200 * time.Millisecond)
}

// within runs f and fails the test when it does not return within limit; it returns how long f
// took. A call still blocked is left to return once the test's cleanup resumes the server.
func within(t *testing.T, limit time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s took %s", what, took.Round(time.Millisecond))
		return took
	case <-time.After(limit):
		t.Fatalf("%s did not return within %s", what, limit)
	}
	return 0
}

func unpublish(ctx context.Context, n *node, target string) error {
	_, err := n.client.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol", TargetPath: target})
	return err
}

func assertGone(t *testing.T, path string) {
	t.Helper()
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := table.Lookup(path); ok {
		t.Fatalf("%s is still mounted", path)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s still exists: %v", path, err)
	}
}

func TestUnpublishOfATargetWhoseServerIsStoppedSucceedsInSeconds(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stopped := publishOnNewMountpointPod(ctx, t, n, "pv-stopped")
	healthy := publishOnNewMountpointPod(ctx, t, n, "pv-healthy")
	stopped.mp.stop(t)
	blockedReader(t, stopped.target)

	t.Run("the stopped server's target is detached and removed", func(t *testing.T) {
		took := within(t, 20*time.Second, "unpublish with a stopped server", func() error { return unpublish(ctx, n, stopped.target) })
		if took > 2*mount.ProbeTimeout+time.Second {
			t.Fatalf("unpublish took %s, want about one probe timeout (%s)", took, mount.ProbeTimeout)
		}
		assertGone(t, stopped.target)
	})
	t.Run("a second unpublish of it succeeds at once", func(t *testing.T) {
		within(t, time.Second, "second unpublish", func() error { return unpublish(ctx, n, stopped.target) })
	})
	t.Run("the healthy server's target still serves and unpublishes", func(t *testing.T) {
		if got := readFile(t, filepath.Join(healthy.target, testfs.HelloName)); got != testfs.HelloContent {
			t.Fatalf("healthy target shows %q", got)
		}
		within(t, 5*time.Second, "unpublish of the healthy target", func() error { return unpublish(ctx, n, healthy.target) })
		assertGone(t, healthy.target)
	})
}

func TestPublishOnAStoppedServerFailsFastAndHoldsNoLock(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stopped := publishOnNewMountpointPod(ctx, t, n, "pv-stopped")
	healthy := publishOnNewMountpointPod(ctx, t, n, "pv-healthy")
	stopped.mp.stop(t)

	t.Run("a second workload of the stopped Mountpoint Pod gets UNAVAILABLE", func(t *testing.T) {
		uid := uuid.NewUUID()
		if _, err := n.createAttachment(ctx, "pv-stopped", "vol-pv-stopped", string(uid), stopped.mpName); err != nil {
			t.Fatal(err)
		}
		target := n.target(uid, "pv-stopped")
		within(t, 20*time.Second, "publish on the stopped server", func() error {
			_, err := n.client.NodePublishVolume(ctx, publishRequest("vol-pv-stopped", target, "bucket-pv-stopped", uid))
			if status.Code(err) != codes.Unavailable {
				return errors.New("want UNAVAILABLE, got " + status.Convert(err).String())
			}
			return nil
		})
		if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the failed publish left its target: %v", err)
		}
	})
	t.Run("republishing the stopped server's target gets UNAVAILABLE", func(t *testing.T) {
		within(t, 20*time.Second, "republish on the stopped server", func() error {
			_, err := n.client.NodePublishVolume(ctx, publishRequest("vol-pv-stopped", stopped.target, "bucket-pv-stopped",
				uuidOf(filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(stopped.target))))))))
			if status.Code(err) != codes.Unavailable {
				return errors.New("want UNAVAILABLE, got " + status.Convert(err).String())
			}
			return nil
		})
	})
	t.Run("the cleanup of the stopped Mountpoint Pod is not held by a lock", func(t *testing.T) {
		cleaner := cleanup.New(n.kubelet.Root, n.pods, n.locks(), time.Hour, nil)
		within(t, 5*time.Second, "clean of the stopped Mountpoint Pod", func() error {
			got, err := cleaner.Clean(ctx, stopped.mpName)
			if err == nil && got != cleanup.OutcomeKept {
				return errors.New("outcome " + got + ", want kept")
			}
			return err
		})
	})
	t.Run("another workload of the healthy Mountpoint Pod publishes and unpublishes", func(t *testing.T) {
		uid := uuid.NewUUID()
		if _, err := n.createAttachment(ctx, "pv-healthy-2", "vol-pv-healthy", string(uid), healthy.mpName); err != nil {
			t.Fatal(err)
		}
		target := n.target(uid, "pv-healthy-2")
		within(t, 10*time.Second, "publish on the healthy server", func() error {
			_, err := n.client.NodePublishVolume(ctx, publishRequest("vol-pv-healthy", target, "bucket-pv-healthy", uid))
			return err
		})
		if got := readFile(t, filepath.Join(target, testfs.HelloName)); got != testfs.HelloContent {
			t.Fatalf("target shows %q", got)
		}
		within(t, 5*time.Second, "unpublish on the healthy server", func() error { return unpublish(ctx, n, target) })
		assertGone(t, target)
	})
}

func TestHealthAndCleanupKeepWorkingWhileOneServerIsStopped(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stopped := publishOnNewMountpointPod(ctx, t, n, "pv-stopped")
	healthy := publishOnNewMountpointPod(ctx, t, n, "pv-healthy")
	gone := publishOnNewMountpointPod(ctx, t, n, "pv-gone")
	stopped.mp.stop(t)
	monitor := health.New(n.kubelet.Root, n.name, mppod.DefaultNamespace, time.Hour, apiServer.Client, nil, nil)

	for _, tc := range []struct {
		name  string
		limit time.Duration
	}{
		{name: "the first check waits one probe timeout for the stopped server and reports the others", limit: 2*mount.ProbeTimeout + time.Second},
		{name: "the next check returns at once: the blocked probe stands for the stopped server", limit: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var states map[string]mount.State
			within(t, tc.limit, "health check", func() error { states = monitor.Check(ctx); return nil })
			want := map[string]mount.State{stopped.mpName: mount.Hung, healthy.mpName: mount.Mounted, gone.mpName: mount.Mounted}
			for name, w := range want {
				if states[name] != w {
					t.Errorf("state of %s = %s, want %s", name, states[name], w)
				}
			}
		})
	}
	t.Run("the sweep cleans the sources of gone Mountpoint Pods, the stopped one included", func(t *testing.T) {
		for _, v := range []servedVolume{stopped, gone} {
			if err := unpublish(ctx, n, v.target); err != nil {
				t.Fatal(err)
			}
			if err := apiServer.Client.Delete(ctx, v.mp.pod, client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 15*time.Second, "the pod gone from the cache", func() bool { p, _ := n.pods.Get(ctx, v.mpName); return p == nil })
		}
		cleaner := cleanup.New(n.kubelet.Root, n.pods, n.locks(), time.Hour, nil)
		within(t, 10*time.Second, "sweep", func() error { cleaner.Sweep(ctx); return nil })
		for _, v := range []servedVolume{stopped, gone} {
			assertGone(t, n.kubelet.SourceDir(v.mpName))
		}
		if got := readFile(t, filepath.Join(healthy.target, testfs.HelloName)); got != testfs.HelloContent {
			t.Fatalf("healthy target shows %q after the sweep", got)
		}
	})
}
