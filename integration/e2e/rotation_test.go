//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
)

// The keys of a volume's Secret are rotated under a workload that reads and writes every half
// second (S13): the operator issues a new key, updates the Secret, and revokes the old key once
// the Mountpoint Pod has it. kubelet's periodic republish (requiresRepublish) hands the new keys
// to the node-agent, which writes them for the mounter; the workload never sees an error, its
// Mountpoint Pod is never restarted and its FUSE mount stays the same connection, and writes made
// after the revocation reach the bucket (so the old key is no longer used).
func TestRotatedSecretKeysAreUsedWithoutARemount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := namespace(t, "rotate")
	suffix := strings.ReplaceAll(ns, "-", "")
	oldKey := [2]string{"OLD" + strings.ToUpper(suffix), "oldSecretKeyOfTheRotationTest-" + suffix}
	newKey := [2]string{"NEW" + strings.ToUpper(suffix), "newSecretKeyOfTheRotationTest-" + suffix}
	for _, k := range [][2]string{oldKey, newKey} {
		t.Cleanup(func() { _ = cfg.DeleteS3User(context.Background(), k[0]) })
	}
	if err := cfg.AddS3User(ctx, oldKey[0], oldKey[1]); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "keys", Namespace: ns},
		StringData: map[string]string{"access_key_id": oldKey[0], "secret_access_key": oldKey[1]},
	}
	create(ctx, t, secret)
	pv := staticClaim(ctx, t, ns, "data", func(pv *corev1.PersistentVolume) {
		pv.Spec.CSI.VolumeAttributes["authenticationSource"] = "secret"
		pv.Spec.CSI.NodePublishSecretRef = &corev1.SecretReference{Name: "keys", Namespace: ns}
	}, fixture.WithMountOptions("allow-delete", "allow-overwrite"))
	worker := busybox(ns, "worker", `i=0
while true; do
  i=$((i+1))
  if echo $i > /data/n.txt && cat /data/seed.txt >/dev/null; then echo OK $i; else echo FAILED $i; fi
  sleep 0.5
done`, claimVolume("data", "data"))
	create(ctx, t, worker)
	waitRunning(ctx, t, worker)
	mp := onlyMountpointPod(ctx, t, pv.Name)
	device := sourceDevice(t, mp.Name)
	keysFile := filepath.Join(cfg.KubeletDir, "pods", string(mp.UID), "volumes", "kubernetes.io~empty-dir",
		mppod.CommVolumeName, mppod.CredentialsName, "s3csi-credentials")

	if err := cfg.AddS3User(ctx, newKey[0], newKey[1]); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	secret.StringData = map[string]string{"access_key_id": newKey[0], "secret_access_key": newKey[1]}
	if err := k8s.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	eventually(ctx, t, "the new key written for the Mountpoint Pod by a republish", func() error {
		b, err := os.ReadFile(keysFile)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), newKey[0]) {
			return fmt.Errorf("%s still holds another key", keysFile)
		}
		return nil
	})
	t.Logf("from the Secret's update to the new key in the Mountpoint Pod: %v", time.Since(rotated).Round(10*time.Millisecond))
	// The mounter checks its key files every 5 s; give it that before the old key goes.
	time.Sleep(6 * time.Second)
	if err := cfg.DeleteS3User(ctx, oldKey[0]); err != nil {
		t.Fatal(err)
	}
	revoked := lastRound(podLog(ctx, t, worker))
	eventually(ctx, t, "ten more rounds after the old key was revoked", func() error {
		if got := lastRound(podLog(ctx, t, worker)); got < revoked+10 {
			return fmt.Errorf("round %d, want %d", got, revoked+10)
		}
		return nil
	})
	if out := podLog(ctx, t, worker); strings.Contains(out, "FAILED") {
		t.Errorf("the worker saw errors across the rotation:\n%s", out)
	}
	got, err := objectE(ctx, bucketOf(pv), "n.txt")
	if n, _ := strconv.Atoi(strings.TrimSpace(got)); err != nil || n <= revoked {
		t.Errorf("object n.txt = %q, %v; want a round after %d, written with the new key", got, err, revoked)
	}
	if err := getPod(ctx, &mp); err != nil {
		t.Fatal(err)
	}
	for _, c := range mp.Status.ContainerStatuses {
		if c.RestartCount != 0 {
			t.Errorf("the Mountpoint Pod's container %s restarted %d times", c.Name, c.RestartCount)
		}
	}
	if got := sourceDevice(t, mp.Name); got != device {
		t.Errorf("the source mount changed from %s to %s: the volume was mounted again", device, got)
	}
}

// sourceDevice is the device (major:minor) of the FUSE connection at Mountpoint Pod mp's source.
func sourceDevice(t testing.TB, mp string) string {
	t.Helper()
	dir, err := mppod.SourceDir(cfg.KubeletDir, mp)
	if err != nil {
		t.Fatal(err)
	}
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := table.Lookup(dir)
	if !ok {
		t.Fatalf("no source mount at %s", dir)
	}
	return fmt.Sprintf("%d:%d", e.Major, e.Minor)
}

// lastRound is the number of the worker's last round in its log, 0 before the first.
func lastRound(log string) int {
	lines := strings.Fields(strings.ReplaceAll(log, "\n", " "))
	for i := len(lines) - 1; i >= 0; i-- {
		if n, err := strconv.Atoi(lines[i]); err == nil {
			return n
		}
	}
	return 0
}
