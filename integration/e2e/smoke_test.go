//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
)

const mountpointNamespace = "mount-s3"

// A pod mounts a dynamically provisioned volume and a static one through kubelet, writes and reads
// both, and sees the FUSE mounts in its own container (the DaemonSet's mount propagation works).
// Deleting the pod and the claims leaves no mount under the kubelet dir, no Mountpoint Pod, no
// attachment, and deletes the dynamic bucket.
func TestSmokeDynamicAndStaticVolumesThroughKubelet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ns := namespace(t, "smoke")

	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: "e2e-" + ns},
		Provisioner:       mppod.DriverName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
		Parameters:        map[string]string{"emptyBucketOnDelete": "true"},
	}
	create(ctx, t, sc)
	dyn := fixture.PVC("dyn", fixture.ClaimInNamespace(ns), fixture.WithClaimStorageClass(sc.Name))
	create(ctx, t, dyn)

	staticBucket := "e2e-static-" + strings.TrimPrefix(ns, "smoke-")
	if err := cfg.MakeBucket(ctx, staticBucket, "seed.txt", "was here before the volume"); err != nil {
		t.Fatal(err)
	}
	pv := fixture.PV("e2e-"+ns, fixture.WithVolumeHandle(staticBucket),
		fixture.WithVolumeAttribute("bucketName", staticBucket), fixture.PreBoundTo(ns, "static"))
	create(ctx, t, pv)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pv) })
	static := fixture.PVC("static", fixture.ClaimInNamespace(ns), fixture.WithVolumeName(pv.Name))
	create(ctx, t, static)

	dynPV := boundVolume(ctx, t, dyn)
	dynBucket := dynPV.Spec.CSI.VolumeHandle

	pod := busybox(ns, "rw", strings.Join([]string{
		"set -e",
		"grep -E ' /(dyn|static) ' /proc/mounts",
		"echo through-kubelet > /dyn/hello.txt",
		"echo through-kubelet > /static/hello.txt",
		"echo dyn: $(cat /dyn/hello.txt)",
		"echo static: $(cat /static/hello.txt)",
		"echo seed: $(cat /static/seed.txt)",
	}, "\n"), claimVolume("dyn", "dyn"), claimVolume("static", "static"))
	create(ctx, t, pod)
	out := waitPodDone(ctx, t, pod)
	for _, want := range []string{" /dyn fuse", " /static fuse", "dyn: through-kubelet", "static: through-kubelet", "seed: was here before the volume"} {
		if !strings.Contains(out, want) {
			t.Errorf("the workload's output lacks %q; it printed:\n%s", want, out)
		}
	}
	for _, bucket := range []string{dynBucket, staticBucket} {
		if got := object(ctx, t, bucket, "hello.txt"); got != "through-kubelet\n" {
			t.Errorf("object %s/hello.txt = %q, want the line the pod wrote", bucket, got)
		}
	}

	for _, obj := range []client.Object{pod, dyn, static} {
		if err := k8s.Delete(ctx, obj); err != nil {
			t.Fatalf("delete %s: %v", obj.GetName(), err)
		}
	}
	pvNames := map[string]bool{pv.Name: true, dynPV.Name: true}
	eventually(ctx, t, "no attachment or Mountpoint Pod left for the test's volumes", func() error {
		var atts s3csiv2.MountpointS3PodAttachmentList
		if err := k8s.List(ctx, &atts); err != nil {
			return err
		}
		for _, a := range atts.Items {
			if pvNames[a.Spec.PersistentVolumeName] {
				return fmt.Errorf("attachment %s of %s remains", a.Name, a.Spec.PersistentVolumeName)
			}
		}
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(mountpointNamespace)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if pvNames[p.Labels["s3.csi.scality.com/volume-name"]] {
				return fmt.Errorf("Mountpoint Pod %s of %s remains (%s)", p.Name, p.Labels["s3.csi.scality.com/volume-name"], p.Status.Phase)
			}
		}
		return nil
	})
	// The pod was the first workload of both volumes, so it named their Mountpoint Pods.
	sources := []string{mppod.Name(string(pod.UID), pv.Name), mppod.Name(string(pod.UID), dynPV.Name)}
	eventually(ctx, t, "no mount left under the kubelet dir for the test's pod and volumes", func() error {
		for _, m := range mountsUnder(t, cfg.KubeletDir) {
			if strings.Contains(m, string(pod.UID)) || strings.Contains(m, sources[0]) || strings.Contains(m, sources[1]) {
				return fmt.Errorf("still mounted: %s", m)
			}
		}
		return nil
	})
	eventually(ctx, t, "the dynamic bucket "+dynBucket+" deleted", func() error {
		_, err := cfg.S3Client().HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(dynBucket)})
		if err == nil {
			return errors.New("it still exists")
		}
		var nf interface{ ErrorCode() string }
		if errors.As(err, &nf) && (nf.ErrorCode() == "NotFound" || nf.ErrorCode() == "NoSuchBucket") {
			return nil
		}
		return err
	})
	if got := object(ctx, t, staticBucket, "seed.txt"); got != "was here before the volume" {
		t.Errorf("the static bucket's object = %q after the claim's deletion: a static bucket is never touched", got)
	}
}

func create(ctx context.Context, t testing.TB, obj client.Object) {
	t.Helper()
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
	if obj.GetNamespace() == "" {
		// Cluster-scoped objects outlive the test's namespace: delete them at the end, even
		// after ctx has expired.
		cleanupCtx := context.WithoutCancel(ctx)
		t.Cleanup(func() {
			if err := k8s.Delete(cleanupCtx, obj); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s: %v", obj.GetName(), err)
			}
		})
	}
}

// boundVolume waits for the claim to be bound and returns its PersistentVolume.
func boundVolume(ctx context.Context, t testing.TB, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	t.Helper()
	eventually(ctx, t, "claim "+pvc.Name+" bound", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
			return err
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			return fmt.Errorf("phase %s", pvc.Status.Phase)
		}
		return nil
	})
	pv := &corev1.PersistentVolume{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		t.Fatalf("get the claim's volume: %v", err)
	}
	return pv
}

func object(ctx context.Context, t testing.TB, bucket, key string) string {
	t.Helper()
	b, err := objectE(ctx, bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// objectE is object returning its error, for a wait on an object that may not be written yet.
func objectE(ctx context.Context, bucket, key string) (string, error) {
	out, err := cfg.S3Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return "", fmt.Errorf("get object %s/%s: %w", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return "", fmt.Errorf("read object %s/%s: %w", bucket, key, err)
	}
	return string(b), nil
}
