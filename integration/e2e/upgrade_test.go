//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// nextTag is the image tag and driver version the chart is upgraded to.
const nextTag = "0.1.0-next"

// The upgrade path (S24): the chart is upgraded to a new image tag and driver version under a
// reader. Every service rolls to the new images; the reader's mount keeps serving through the
// node-agent's replacement and never fails; its Mountpoint Pod stays the old version on the same
// FUSE connection; a new pod on the same volume gets a Mountpoint Pod of the new version (no
// Mountpoint Pod serves two driver versions). Then the reader's Mountpoint Pod is deleted, and its
// mount moves to a Mountpoint Pod of the new version without an error or a restart (the new
// node-agent reattached to the old mounter). The release is upgraded back afterwards.
func TestChartUpgradeToANewTagKeepsLiveMountsServing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ns := namespace(t, "upgrade")
	pv := staticClaim(ctx, t, ns, "data")
	reader := busybox(ns, "reader", "while true; do if [ \"$(cat /data/seed.txt)\" = seed ]; then echo read; else echo READ-FAILED; fi; sleep 0.2; done",
		claimVolume("data", "data"))
	create(ctx, t, reader)
	waitRunning(ctx, t, reader)
	old := onlyMountpointPod(ctx, t, pv.Name)
	oldImage := old.Spec.Containers[0].Image
	from := oldImage[strings.LastIndex(oldImage, ":")+1:]
	device := sourceDevice(t, old.Name)

	if err := cfg.TagImages(ctx, from, nextTag); err != nil {
		t.Fatal(err)
	}
	logf := func(f string, a ...any) { t.Logf(f, a...) }
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		if err := cfg.InstallChart(ctx, logf, "--set", "driverVersion="); err != nil {
			t.Errorf("upgrade the release back: %v", err)
		}
	})
	start := time.Now()
	if err := cfg.InstallChart(ctx, logf, "--set", "image.tag="+nextTag, "--set", "driverVersion="+nextTag); err != nil {
		t.Fatalf("upgrade the chart to %s: %v", nextTag, err)
	}
	t.Logf("helm upgrade --wait to %s took %v", nextTag, time.Since(start).Round(100*time.Millisecond))
	var running corev1.PodList
	if err := k8s.List(ctx, &running, client.InNamespace("s3csi")); err != nil {
		t.Fatal(err)
	}
	for _, p := range running.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Spec.Containers {
			if !strings.HasSuffix(c.Image, ":"+nextTag) {
				t.Errorf("pod %s container %s runs %s after the upgrade", p.Name, c.Name, c.Image)
			}
		}
	}
	time.Sleep(3 * time.Second) // the reader reads on through the new node-agent
	if out := podLog(ctx, t, reader); strings.Contains(out, "READ-FAILED") || !strings.HasSuffix(out, "read\n") {
		t.Fatalf("the reader failed across the upgrade:\n%s", lastLines(out, 5))
	}
	if err := getPod(ctx, &old); err != nil || old.DeletionTimestamp != nil {
		t.Fatalf("the reader's Mountpoint Pod is gone or going after the upgrade: %v", err)
	}
	if got := sourceDevice(t, old.Name); got != device {
		t.Errorf("the reader's source changed from %s to %s: it was mounted again", device, got)
	}

	// echo ends the line: kubelet's log shows a line only once it ends.
	next := busybox(ns, "next", "echo \"$(cat /data/seed.txt)\"; sleep 3600", claimVolume("data", "data"))
	create(ctx, t, next)
	waitRunning(ctx, t, next)
	eventually(ctx, t, "the new pod reading the volume", func() error {
		if out := podLog(ctx, t, next); out != "seed\n" {
			return fmt.Errorf("the new pod printed %q, want seed", out)
		}
		return nil
	})
	atts, mps, err := attachmentsOf(ctx, pv.Name)
	if err != nil {
		t.Fatal(err)
	}
	var served string
	for _, a := range atts {
		for mp, ws := range a.Spec.MountpointS3PodAttachments {
			for _, w := range ws {
				if w.WorkloadPodUID == string(next.UID) {
					served = mp
				}
			}
		}
	}
	found := false
	for _, mp := range mps {
		if mp.Name != served {
			continue
		}
		found = true
		if mp.Name == old.Name {
			t.Fatalf("the new pod shares the Mountpoint Pod of the old version %s", old.Name)
		}
		if img := mp.Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+nextTag) || mp.Labels[s3csiv2.LabelDriverVersion] != nextTag {
			t.Errorf("the new pod's Mountpoint Pod runs %s, version label %q; want %s", img, mp.Labels[s3csiv2.LabelDriverVersion], nextTag)
		}
	}
	if !found {
		t.Fatalf("no Mountpoint Pod found for the new pod (attachments name %q)", served)
	}

	// The reader moves to the new version: its Mountpoint Pod, of the old one, is deleted. The
	// node-agent of the new version reattached to its mounter when it started, so the mounter
	// hands the mount over to the pod that replaces it, which runs the new images.
	start = time.Now()
	if err := k8s.Delete(ctx, &old); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "a Normal MountpointHandedOver Event on the reader", func() error {
		if events := podEvents(ctx, reader); !strings.Contains(events, "Normal MountpointHandedOver") {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})
	t.Logf("from deleting the old version's Mountpoint Pod to the reader's MountpointHandedOver Event: %v",
		time.Since(start).Round(10*time.Millisecond))
	moved := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: old.Name, Namespace: old.Namespace}}
	if err := getPod(ctx, &moved); err != nil {
		t.Fatal(err)
	}
	if img := moved.Spec.Containers[0].Image; moved.UID == old.UID || !strings.HasSuffix(img, ":"+nextTag) {
		t.Errorf("the reader's Mountpoint Pod after the hand-over: uid %s (old %s), image %s; want a new pod of %s", moved.UID, old.UID, img, nextTag)
	}
	time.Sleep(2 * time.Second) // the reader reads on through the new mounter
	if out := podLog(ctx, t, reader); strings.Contains(out, "READ-FAILED") || !strings.HasSuffix(out, "read\n") {
		t.Fatalf("the reader failed across the hand-over to the new version:\n%s", lastLines(out, 5))
	}
	if err := getPod(ctx, reader); err != nil {
		t.Fatal(err)
	}
	for _, c := range reader.Status.ContainerStatuses {
		if c.RestartCount != 0 {
			t.Fatalf("the reader's container %s restarted %d times", c.Name, c.RestartCount)
		}
	}
}

// previousChart is the commit whose chart TestUpgradeFromThePreviousChartKeepsAReaderReading
// starts from: the last version before pull Secrets for Mountpoint Pods, node architectures and
// the registry install path. (An older chart cannot reach the cluster's S3 server, which speaks
// HTTPS under a private CA only: private-CA support came with that version.)
const previousChart = "794d4f5"

// An operator's upgrade from the previous chart to this one (S24): the release runs the previous
// chart, taken from git as the test packages it, with a reader on a volume; `helm upgrade` to
// the chart in the registry keeps the reader reading without an error, its Mountpoint Pod keeps
// serving, and a new pod mounts a volume afterwards.
func TestUpgradeFromThePreviousChartKeepsAReaderReading(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	logf := func(f string, a ...any) { t.Logf(f, a...) }
	dir := t.TempDir()
	var out strings.Builder
	extract := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" charts/s3csi | tar -x -C "$3"`, "sh", cfg.RepoRoot, previousChart, dir)
	extract.Stdout, extract.Stderr = &out, &out
	if err := extract.Run(); err != nil {
		t.Fatalf("take the chart of %s from git (a clone with its history is needed): %v: %s", previousChart, err, out.String())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		if err := cfg.InstallChart(ctx, logf); err != nil {
			t.Errorf("install this chart back: %v", err)
		}
	})
	if err := cfg.InstallChartDir(ctx, logf, filepath.Join(dir, "charts", "s3csi")); err != nil {
		t.Fatalf("install the chart of %s: %v", previousChart, err)
	}
	ns := namespace(t, "previous")
	pv := staticClaim(ctx, t, ns, "data")
	reader := busybox(ns, "reader", timedReader, claimVolume("data", "data"))
	create(ctx, t, reader)
	waitRunning(ctx, t, reader)
	old := onlyMountpointPod(ctx, t, pv.Name)

	start := time.Now()
	if err := cfg.InstallChart(ctx, logf); err != nil {
		t.Fatalf("upgrade from the chart of %s: %v", previousChart, err)
	}
	t.Logf("helm upgrade --wait from the chart of %s took %v", previousChart, time.Since(start).Round(100*time.Millisecond))
	time.Sleep(3 * time.Second) // the reader reads on through the new node-agent
	t.Logf("the reader's longest pause: %v", readPauses(t, podLog(ctx, t, reader)).Round(10*time.Millisecond))
	if err := getPod(ctx, &old); err != nil || old.DeletionTimestamp != nil {
		t.Fatalf("the reader's Mountpoint Pod is gone or going after the upgrade: %v", err)
	}
	staticClaim(ctx, t, ns, "other")
	next := busybox(ns, "next", "cat /data/seed.txt; echo \" rc=$?\"; sleep 3600", claimVolume("data", "other"))
	create(ctx, t, next)
	eventually(ctx, t, "the next pod reads its volume", func() error {
		if err := getPod(ctx, next); err != nil {
			return err
		}
		if next.Status.Phase == corev1.PodPending {
			return errors.New("it is pending")
		}
		if out := podLog(ctx, t, next); !strings.HasPrefix(out, "seed rc=0") {
			return fmt.Errorf("it printed %q", out)
		}
		return nil
	})
}
