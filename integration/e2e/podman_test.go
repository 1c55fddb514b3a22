//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/integration/podmanenv"
)

// A pod that ran while Podman started a container beside the cluster (as the container suite
// does, on a bridge network) terminates when deleted. Podman binds the host's network namespace
// dir onto itself when it finds no mount point there, which hid the namespaces containerd had
// mounted in it: containerd could then neither unmount nor unlink the pod's namespace ("unlinkat
// /var/run/netns/cni-…: device or resource busy" in kubelet's log) and the pod stayed Terminating
// for good. The cluster now makes that dir a shared mount point itself, so Podman stacks nothing.
func TestAPodStartedBeforePodmanRanAContainerTerminates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := namespace(t, "podman")
	pod := sleeper(ns, "before-podman")
	create(ctx, t, pod)
	waitRunning(ctx, t, pod)

	podman, err := podmanenv.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := podman.Close(); err != nil {
			t.Errorf("remove the test's podman: %v", err)
		}
	})
	if err := podman.Load(filepath.Join(cfg.ImageDir(), "s3csi-busybox-1.35.tar")); err != nil {
		t.Fatal(err)
	}
	// The image's entrypoint is /bin/sh.
	if out, err := podman.Run("run", "--rm", "--network", "bridge", "docker.io/s3csi/busybox:1.35", "-c", "true"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	if err := k8s.Delete(ctx, pod); err != nil {
		t.Fatalf("delete pod %s: %v", pod.Name, err)
	}
	gone, cancelGone := context.WithTimeout(ctx, 60*time.Second)
	defer cancelGone()
	eventually(gone, t, "pod "+pod.Name+" gone after Podman ran a container", func() error {
		var got corev1.Pod
		err := k8s.Get(gone, client.ObjectKeyFromObject(pod), &got)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("still there, phase %s; if it stays Terminating, kubelet's log %s says why; events: %s",
			got.Status.Phase, cfg.LogFile("kubelet"), podEvents(gone, pod))
	})
}
