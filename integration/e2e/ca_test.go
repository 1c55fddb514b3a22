//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
)

// The cluster's S3 endpoint serves HTTPS with a private CA, which every other test's install
// gives the chart as s3.caBundle. Installed without it, a mount and a provisioning fail, and
// what the operator reads (the workload's FailedMount event, the claim's ProvisioningFailed
// event) says the certificate is not trusted and names the chart value to set.
func TestWithoutTheEndpointsCAMountsAndProvisioningSayWhatToSet(t *testing.T) {
	if !strings.HasPrefix(cfg.S3Endpoint(), "https://") {
		t.Fatalf("the cluster's S3 endpoint %s does not serve HTTPS", cfg.S3Endpoint())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	logf := func(f string, a ...any) { t.Logf(f, a...) }
	// A later --set-file replaces the install's: the chart is rendered without a CA.
	if err := cfg.InstallChart(ctx, logf, "--set-file", "s3.caBundle="+os.DevNull); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		if err := cfg.InstallChart(ctx, logf); err != nil {
			t.Errorf("install the chart with the CA again: %v", err)
		}
	})
	ns := namespace(t, "noca")
	// The bucket is made from the host, which trusts the CA; only the driver does not.
	staticClaim(ctx, t, ns, "data")
	pod := busybox(ns, "w", "cat /data/seed.txt", claimVolume("data", "data"))
	create(ctx, t, pod)

	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: "e2e-" + ns},
		Provisioner:       mppod.DriverName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	create(ctx, t, sc)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), sc) })
	dyn := fixture.PVC("dyn", fixture.ClaimInNamespace(ns), fixture.WithClaimStorageClass(sc.Name))
	create(ctx, t, dyn)

	says := func(events string, reason string) error {
		for _, want := range []string{reason, "not trusted", "s3.caBundle"} {
			if !strings.Contains(events, want) {
				return fmt.Errorf("no %q in the events: %s", want, events)
			}
		}
		return nil
	}
	eventually(ctx, t, "a FailedMount event saying the certificate is not trusted and naming s3.caBundle", func() error {
		return says(podEvents(ctx, pod), "FailedMount")
	})
	eventually(ctx, t, "a ProvisioningFailed event saying the same", func() error {
		var list corev1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var b strings.Builder
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "PersistentVolumeClaim" && e.InvolvedObject.Name == dyn.Name {
				fmt.Fprintf(&b, "%s: %s\n", e.Reason, e.Message)
			}
		}
		return says(b.String(), "ProvisioningFailed")
	})
	if err := getPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodPending {
		t.Errorf("the workload is %s, want it Pending: its volume must not mount", pod.Status.Phase)
	}
	if err := k8s.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, dyn); err != nil {
		t.Fatal(err)
	}
}
