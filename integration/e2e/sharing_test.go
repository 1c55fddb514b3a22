//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"
)

// staticClaim creates a bucket e2e-<ns>-<claim> holding seed.txt ("seed"), a PersistentVolume on
// it (changed by mods) and a claim bound to it in ns; the volume is deleted at the end of the test.
func staticClaim(ctx context.Context, t testing.TB, ns, claim string, mods ...fixture.PVMod) *corev1.PersistentVolume {
	t.Helper()
	bucket := "e2e-" + ns + "-" + claim
	if err := cfg.MakeBucket(ctx, bucket, "seed.txt", "seed"); err != nil {
		t.Fatal(err)
	}
	mods = append([]fixture.PVMod{
		fixture.WithVolumeHandle(bucket), fixture.WithVolumeAttribute("bucketName", bucket), fixture.PreBoundTo(ns, claim),
	}, mods...)
	pv := fixture.PV("e2e-"+ns+"-"+claim, mods...)
	create(ctx, t, pv)
	create(ctx, t, fixture.PVC(claim, fixture.ClaimInNamespace(ns), fixture.WithVolumeName(pv.Name)))
	return pv
}

// bucketOf is the bucket of a static volume.
func bucketOf(pv *corev1.PersistentVolume) string { return pv.Spec.CSI.VolumeHandle }

// onlyMountpointPod is the one Mountpoint Pod serving volume pv; the test fails unless there is
// exactly one.
func onlyMountpointPod(ctx context.Context, t testing.TB, pv string) corev1.Pod {
	t.Helper()
	_, mps, err := attachmentsOf(ctx, pv)
	if err != nil || len(mps) != 1 {
		t.Fatalf("find the Mountpoint Pod: %d pods, %v", len(mps), err)
	}
	return mps[0]
}

// attachmentsOf lists the attachments of a volume and the Mountpoint Pods serving it.
func attachmentsOf(ctx context.Context, pv string) ([]s3csiv2.MountpointS3PodAttachment, []corev1.Pod, error) {
	var atts s3csiv2.MountpointS3PodAttachmentList
	if err := k8s.List(ctx, &atts); err != nil {
		return nil, nil, err
	}
	var mine []s3csiv2.MountpointS3PodAttachment
	for _, a := range atts.Items {
		if a.Spec.PersistentVolumeName == pv {
			mine = append(mine, a)
		}
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(mountpointNamespace),
		client.MatchingLabels{"s3.csi.scality.com/volume-name": pv}); err != nil {
		return nil, nil, err
	}
	return mine, pods.Items, nil
}

func waitRunning(ctx context.Context, t testing.TB, pods ...*corev1.Pod) {
	t.Helper()
	for _, pod := range pods {
		eventually(ctx, t, "pod "+pod.Name+" running", func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return err
			}
			if pod.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("phase %s; events: %s", pod.Status.Phase, podEvents(ctx, pod))
			}
			return nil
		})
	}
}

// A Deployment of three replicas on one claim: its pods share one Mountpoint Pod and one
// attachment, each writes through it, and scaling the Deployment to 0 leaves no Mountpoint Pod
// and no attachment (logs how long that takes).
func TestPodsOfADeploymentShareOneMountpointPodUntilScaledToZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := namespace(t, "share")
	pv := staticClaim(ctx, t, ns, "data")
	labels := map[string]string{"app": "writer"}
	pod := busybox(ns, "writer", "echo $HOSTNAME > /data/$HOSTNAME.txt && exec sleep 3600", claimVolume("data", "data"))
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "writer", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
		},
	}
	create(ctx, t, deploy)
	var pods corev1.PodList
	eventually(ctx, t, "three Running replicas", func() error {
		if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running != 3 {
			return fmt.Errorf("%d of %d pods Running", running, len(pods.Items))
		}
		return nil
	})
	eventually(ctx, t, "one attachment naming the three workloads, one Mountpoint Pod", func() error {
		atts, mps, err := attachmentsOf(ctx, pv.Name)
		if err != nil {
			return err
		}
		if len(atts) != 1 || len(mps) != 1 {
			return fmt.Errorf("%d attachments and %d Mountpoint Pods", len(atts), len(mps))
		}
		workloads := 0
		for _, ws := range atts[0].Spec.MountpointS3PodAttachments {
			workloads += len(ws)
		}
		if workloads != 3 {
			return fmt.Errorf("the attachment names %d workloads", workloads)
		}
		return nil
	})
	for _, p := range pods.Items {
		key := p.Name + ".txt"
		eventually(ctx, t, "object "+key+" in S3", func() error {
			got, err := objectE(ctx, bucketOf(pv), key)
			if err != nil {
				return err
			}
			if got != p.Name+"\n" {
				return fmt.Errorf("object holds %q", got)
			}
			return nil
		})
	}

	start := time.Now()
	if err := k8s.Patch(ctx, deploy, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "no attachment or Mountpoint Pod left", func() error {
		atts, mps, err := attachmentsOf(ctx, pv.Name)
		if err != nil {
			return err
		}
		if len(atts)+len(mps) > 0 {
			return fmt.Errorf("%d attachments and %d Mountpoint Pods remain", len(atts), len(mps))
		}
		return nil
	})
	t.Logf("from scaling the Deployment to 0 to no Mountpoint Pod and no attachment: %v", time.Since(start).Round(10*time.Millisecond))
}

// A node-agent restarted under live mounts (S4): the workload keeps reading through its mount,
// a new pod on the same volume mounts, and the source is mounted once.
func TestNodeAgentRestartKeepsLiveMountsServing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := namespace(t, "agent-restart")
	pv := staticClaim(ctx, t, ns, "data")
	reader := busybox(ns, "reader",
		"while true; do if [ \"$(cat /data/seed.txt)\" = seed ]; then echo read; else echo READ-FAILED; fi; sleep 0.2; done",
		claimVolume("data", "data"))
	create(ctx, t, reader)
	waitRunning(ctx, t, reader)

	var agents corev1.PodList
	if err := k8s.List(ctx, &agents, client.InNamespace("s3csi"), client.MatchingLabels{"app.kubernetes.io/component": "node-agent"}); err != nil || len(agents.Items) != 1 {
		t.Fatalf("find the node-agent pod: %d pods, %v", len(agents.Items), err)
	}
	old := agents.Items[0]
	if err := k8s.Delete(ctx, &old); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "a new node-agent ready", func() error {
		var list corev1.PodList
		if err := k8s.List(ctx, &list, client.InNamespace("s3csi"), client.MatchingLabels{"app.kubernetes.io/component": "node-agent"}); err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.UID == old.UID {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		return fmt.Errorf("%d node-agent pods, none new and ready", len(list.Items))
	})

	second := busybox(ns, "second", "cat /data/seed.txt", claimVolume("data", "data"))
	create(ctx, t, second)
	if out := waitPodDone(ctx, t, second); out != "seed" {
		t.Errorf("a pod mounting after the restart read %q, want the seed object", out)
	}
	log := podLog(ctx, t, reader)
	if strings.Contains(log, "READ-FAILED") || strings.Count(log, "read") < 10 {
		t.Errorf("the reader saw a failure or too few reads across the restart:\n%s", log)
	}
	_, mps, err := attachmentsOf(ctx, pv.Name)
	if err != nil || len(mps) != 1 {
		t.Fatalf("Mountpoint Pods of the volume: %d, %v; want 1", len(mps), err)
	}
	mounted := 0
	for _, m := range mountsUnder(t, cfg.KubeletDir) {
		if strings.Contains(m, "/mnt/"+mps[0].Name+" ") {
			mounted++
		}
	}
	if mounted != 1 {
		t.Errorf("the source of %s is mounted %d times, want once", mps[0].Name, mounted)
	}
}
