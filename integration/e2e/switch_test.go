//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/integration/cluster"
	"github.com/s3csi/s3csi/integration/scality"
)

// scalityExampleOptions are mount options of the Scality driver's example PersistentVolumes.
var scalityExampleOptions = []string{"allow-delete", "aws-max-attempts 5", "debug-crt", "cache /tmp/s3-pv1-cache", "metadata-ttl 3", "max-cache-size 500"}

// timedReader reads /data/seed.txt every 0.2 s and prints "read <uptime seconds>" or READ-FAILED.
const timedReader = `while true; do if [ "$(cat /data/seed.txt)" = seed ]; then echo "read $(cut -d' ' -f1 /proc/uptime)"; ` +
	`else echo READ-FAILED; fi; sleep 0.2; done`

// readPauses checks a timedReader's log: it fails the test on a failed read and returns the
// longest time between two reads.
func readPauses(t *testing.T, out string) time.Duration {
	t.Helper()
	if strings.Contains(out, "READ-FAILED") {
		t.Fatalf("the reader failed:\n%s", lastLines(out, 10))
	}
	var longest time.Duration
	prev := -1.0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		s, ok := strings.CutPrefix(line, "read ")
		if !ok {
			continue
		}
		at, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("reader line %q: %v", line, err)
		}
		if prev >= 0 {
			longest = max(longest, time.Duration((at-prev)*float64(time.Second)))
		}
		prev = at
	}
	if prev < 0 {
		t.Fatalf("the reader never read:\n%s", lastLines(out, 10))
	}
	return longest
}

// helmRun runs the pinned helm against the cluster in namespace.
func helmRun(ctx context.Context, namespace string, args ...string) error {
	cmd := exec.CommandContext(ctx, cfg.Helm(), append(args, "--kubeconfig", cfg.Kubeconfig(), "--namespace", namespace)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// TestSwitchFromScalityAndBackKeepsReadersReading runs docs/migrating-from-scality.md on the
// cluster, in both directions, under live readers.
//
// The cluster is first brought to the state the Scality driver 2.2 leaves: s3csi's release is
// uninstalled (its Mountpoint Pod keeps serving the reader), the Mountpoint namespace is handed
// to a release of a chart shaped as Scality's (scality.WriteChart: the namespace as a plain
// template, its CSIDriver, its CRD without readOnly and selectable fields, which replaces
// s3csi's), and root's records are removed (Scality's driver keeps none). Then the switch: the
// Scality release is upgraded through `kubectl s3csi migrate keep-namespaces`, uninstalled, and
// s3csi installed. The reader reads on; the janitor upgrades the CRD; a new pod mounts the volume;
// the Mountpoint Pod retires once its workloads have left. Then the roll-back, under a second
// reader of a volume s3csi mounted: s3csi uninstalled, the Scality release installed again; and
// the switch once more, leaving s3csi installed for the other tests.
func TestSwitchFromScalityAndBackKeepsReadersReading(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	logf := func(f string, a ...any) { t.Logf(f, a...) }
	// Before the clean-up below, which therefore runs first: a pod of this namespace is deleted
	// only once a driver unpublishes its volumes.
	ns := namespace(t, "switch")
	chart := t.TempDir()
	if err := scality.WriteChart(chart); err != nil {
		t.Fatal(err)
	}
	plugin, err := scality.BuildPlugin(ctx, cfg.RepoRoot, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	switchToS3CSI := func(ctx context.Context) error {
		if err := helmRun(ctx, scality.Namespace, append([]string{"upgrade", scality.Release, chart}, scality.KeepArgs(plugin)...)...); err != nil {
			return err
		}
		if err := helmRun(ctx, scality.Namespace, "uninstall", scality.Release, "--wait"); err != nil {
			return err
		}
		return cfg.InstallChart(ctx, logf)
	}
	scalityInstalled := false
	t.Cleanup(func() {
		if !scalityInstalled {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		if err := switchToS3CSI(ctx); err != nil {
			t.Errorf("switch back to s3csi for the other tests: %v", err)
		}
	})

	// The options of Scality's example PersistentVolumes (aws_max_attempts.yaml,
	// advanced_local_caching.yaml, debug-logging.yaml): they mount, and the reader is told which
	// s3csi ignores.
	pv := staticClaim(ctx, t, ns, "data", fixture.WithMountOptions(scalityExampleOptions...))
	reader := busybox(ns, "reader", timedReader, claimVolume("data", "data"))
	create(ctx, t, reader)
	waitRunning(ctx, t, reader)
	eventually(ctx, t, "a Warning MountOptionsIgnored Event on the reader naming debug-crt", func() error {
		if events := podEvents(ctx, reader); !strings.Contains(events, "Warning MountOptionsIgnored") || !strings.Contains(events, "debug-crt") {
			return fmt.Errorf("events: %s", events)
		}
		return nil
	})
	old := onlyMountpointPod(ctx, t, pv.Name)
	stillServing := func(step string) {
		t.Helper()
		if err := getPod(ctx, &old); err != nil || old.DeletionTimestamp != nil {
			t.Fatalf("after %s the reader's Mountpoint Pod is gone or going (%v)", step, err)
		}
		time.Sleep(time.Second)
		t.Logf("after %s the reader's longest pause so far: %v", step, readPauses(t, podLog(ctx, t, reader)).Round(10*time.Millisecond))
	}

	// The state the Scality driver leaves.
	if err := helmRun(ctx, cluster.ReleaseNamespace, "uninstall", cluster.ReleaseName, "--wait"); err != nil {
		t.Fatal(err)
	}
	stillServing("s3csi's uninstall")
	replaceCRD(ctx, t)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"meta.helm.sh/release-name":%q,"meta.helm.sh/release-namespace":%q}}}`,
		scality.Release, scality.Namespace)
	mpNamespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mppod.DefaultNamespace}}
	if err := k8s.Patch(ctx, mpNamespace, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	// Root's records of the node-agent (services/node-agent/internal/source/record.go).
	if err := os.RemoveAll(filepath.Join(mppod.PluginDir(cfg.KubeletDir), "records")); err != nil {
		t.Fatal(err)
	}
	if err := helmRun(ctx, scality.Namespace, "install", scality.Release, chart); err != nil {
		t.Fatal(err)
	}
	scalityInstalled = true
	stillServing("the Scality release's install")

	// The switch.
	start := time.Now()
	if err := switchToS3CSI(ctx); err != nil {
		t.Fatal(err)
	}
	scalityInstalled = false
	t.Logf("the switch (upgrade, uninstall, install --wait) took %v", time.Since(start).Round(100*time.Millisecond))
	stillServing("the switch")
	eventually(ctx, t, "the janitor to upgrade the CRD", func() error {
		if missing := crdLacks(ctx, t); missing != "" {
			return fmt.Errorf("the CRD still lacks %s", missing)
		}
		return nil
	})
	// It also prints the files' group: 0, as under the Scality driver (no gid, no fsGroup).
	next := busybox(ns, "next", "echo \"$(cat /data/seed.txt) $(stat -c %g /data/seed.txt)\"; sleep 3600", claimVolume("data", "data"))
	create(ctx, t, next)
	waitRunning(ctx, t, next)
	eventually(ctx, t, "the new pod reading the volume", func() error {
		if out := podLog(ctx, t, next); out != "seed 0\n" {
			return fmt.Errorf("the new pod printed %q, want the content and group: seed 0", out)
		}
		return nil
	})
	pause := readPauses(t, podLog(ctx, t, reader)).Round(10 * time.Millisecond)
	t.Logf("switch from Scality: the reader's longest pause between two reads was %v", pause)

	// A second reader, mounted by s3csi, for the roll-back.
	pv2 := staticClaim(ctx, t, ns, "data2")
	reader2 := busybox(ns, "reader2", timedReader, claimVolume("data", "data2"))
	create(ctx, t, reader2)
	waitRunning(ctx, t, reader2)
	mp2 := onlyMountpointPod(ctx, t, pv2.Name)

	// The first Mountpoint Pod retires once its workloads have left.
	for _, p := range []*corev1.Pod{reader, next} {
		if err := k8s.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	eventually(ctx, t, "the first Mountpoint Pod to retire", func() error {
		err := getPod(ctx, &old)
		if err != nil || old.DeletionTimestamp != nil || old.Annotations[mppod.AnnotationNeedsUnmount] == "true" {
			return nil
		}
		return fmt.Errorf("Mountpoint Pod %s still serves: annotations %v", old.Name, old.Annotations)
	})

	// The roll-back.
	start = time.Now()
	if err := helmRun(ctx, cluster.ReleaseNamespace, "uninstall", cluster.ReleaseName, "--wait"); err != nil {
		t.Fatal(err)
	}
	if err := helmRun(ctx, scality.Namespace, "install", scality.Release, chart); err != nil {
		t.Fatal(err)
	}
	scalityInstalled = true
	t.Logf("the roll-back (uninstall --wait, install) took %v", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(2 * time.Second)
	if err := getPod(ctx, &mp2); err != nil || mp2.DeletionTimestamp != nil {
		t.Fatalf("after the roll-back the second reader's Mountpoint Pod is gone or going (%v)", err)
	}
	pause = readPauses(t, podLog(ctx, t, reader2)).Round(10 * time.Millisecond)
	t.Logf("roll-back to Scality: the second reader's longest pause between two reads was %v", pause)

	// Back to s3csi for the other tests; the second reader reads on through it.
	if err := switchToS3CSI(ctx); err != nil {
		t.Fatal(err)
	}
	scalityInstalled = false
	time.Sleep(2 * time.Second)
	t.Logf("after switching again the second reader's longest pause: %v", readPauses(t, podLog(ctx, t, reader2)).Round(10*time.Millisecond))
}

// crdName is the attachment CRD's name.
var crdName = types.NamespacedName{Name: s3csiv2.CRDName}

// crdObject reads the attachment CRD.
func crdObject(ctx context.Context, t *testing.T) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	if err := k8s.Get(ctx, crdName, u); err != nil {
		t.Fatal(err)
	}
	return u
}

// replaceCRD makes the cluster's attachment CRD the Scality driver's (scality.CRD).
func replaceCRD(ctx context.Context, t *testing.T) {
	t.Helper()
	want, err := scality.CRD()
	if err != nil {
		t.Fatal(err)
	}
	u := crdObject(ctx, t)
	versions, _, _ := unstructured.NestedSlice(want.Object, "spec", "versions")
	if err := unstructured.SetNestedSlice(u.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Update(ctx, u); err != nil {
		t.Fatalf("install the Scality driver's CRD: %v", err)
	}
	if missing := crdLacks(ctx, t); !strings.Contains(missing, "readOnly") {
		t.Fatalf("the Scality driver's CRD lacks %q, want readOnly", missing)
	}
}

// crdLacks says what of s3csi's the cluster's attachment CRD lacks: "readOnly",
// "selectableFields", both, or "".
func crdLacks(ctx context.Context, t *testing.T) string {
	t.Helper()
	u := crdObject(ctx, t)
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	var missing []string
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if _, ok, _ := unstructured.NestedMap(m, "schema", "openAPIV3Schema", "properties", "spec", "properties", "readOnly"); !ok {
			missing = append(missing, "readOnly")
		}
		if fields, _, _ := unstructured.NestedSlice(m, "selectableFields"); len(fields) == 0 {
			missing = append(missing, "selectableFields")
		}
	}
	return strings.Join(missing, ", ")
}
