//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/integration/guide"
)

// What the guide's pods print: the static examples' bucket holds helloKey with helloText (the
// test writes it, without a final newline, as a reader's file may be: the pods echo one, since
// a partial line never reaches the pod log), and the dynamic example writes the same text into
// its new bucket before printing it.
const (
	helloKey  = "hello.txt"
	helloText = "Hello from s3csi"
)

// Every example of the operator's guide that a reader applies (a ```yaml block whose first line
// is "# guide: <name>", docs/operator-guide.md) works as written on the cluster, installed as
// the guide installs it. The test applies each block in page order with the cluster's kubectl
// into one namespace of its own, filling the guide's placeholders in (integration/guide):
//
//   - the bucket my-bucket becomes a new bucket holding helloKey;
//   - each PersistentVolume and StorageClass is named <namespace>-<name> (s3-pv becomes
//     guide-xxxxx-s3-pv), and so are the claims' references to it: cluster-scoped objects of
//     two runs never meet;
//   - the namespace of a PersistentVolume's Secret reference (the guide's `default`) becomes the
//     test's namespace; the guide writes no namespace on its namespaced objects;
//   - the keys of a Secret's stringData become those of an S3 user the test creates;
//   - the guide's `busybox` becomes the cluster's s3csi/busybox:1.35 with imagePullPolicy
//     IfNotPresent (the cluster pulls nothing from the Internet), and the pods' grace period 1 s
//     (the guide's `exec sleep` as PID 1 ignores SIGTERM, and the namespace would take 30 s to go).
//
// Then every claim of the block is Bound and its bucket holds helloKey with helloText (for a
// dynamic claim: the pod's write reached S3), every pod is Running and its log shows helloText,
// and no pod got a MountOptionsIgnored or InvalidVolume Warning. At the end the namespace goes
// first, then the PersistentVolumes and StorageClasses the test created; a dynamic volume must be
// deleted by the csi-controller once its claim is gone, as the guide says.
func TestTheOperatorGuidesExamplesWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	doc, err := os.ReadFile(filepath.Join(cfg.RepoRoot, "docs", "operator-guide.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := guide.Blocks(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatalf("docs/operator-guide.md has no ```%s block whose first line is %q <name>: nothing of the guide is tested", guide.InfoString, guide.Marker)
	}

	// Registered before the namespace, so it runs after the namespace is gone: static volumes
	// are Released then, and a dynamic one is being deleted by the provisioner.
	var clusterScoped []*unstructured.Unstructured
	var dynamic []*corev1.PersistentVolume
	t.Cleanup(func() { deleteGuideObjects(t, clusterScoped, dynamic) })
	ns := namespace(t, "guide")

	target := guide.Target{
		Namespace: ns, Bucket: "e2e-" + ns, NamePrefix: ns,
		Image: "s3csi/busybox:1.35", PullPolicy: string(corev1.PullIfNotPresent), GracePeriodSeconds: ptr.To[int64](1),
	}
	if err := cfg.MakeBucket(ctx, target.Bucket, helloKey, helloText); err != nil {
		t.Fatal(err)
	}
	suffix := strings.ReplaceAll(ns, "-", "")
	target.AccessKeyID, target.SecretAccessKey = strings.ToUpper(suffix), "guideSecretKey-"+suffix
	t.Cleanup(func() { _ = cfg.DeleteS3User(context.Background(), target.AccessKeyID) })
	if err := cfg.AddS3User(ctx, target.AccessKeyID, target.SecretAccessKey); err != nil {
		t.Fatal(err)
	}
	examples, err := guide.Prepare(blocks, target)
	if err != nil {
		t.Fatal(err)
	}
	// A namespace's default ServiceAccount is made shortly after the namespace; a pod applied
	// before it would be refused.
	eventually(ctx, t, "the default ServiceAccount of "+ns, func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
	})

	for _, e := range examples {
		t.Run(e.Name, func(t *testing.T) {
			manifest, err := guide.Manifest(e.Objects)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), e.Name+".yaml")
			if err := os.WriteFile(file, manifest, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, o := range e.Objects {
				if guide.ClusterScoped(o.GetKind()) {
					clusterScoped = append(clusterScoped, o)
				}
			}
			var out strings.Builder
			if err := cfg.Kubectl(ctx, &out, &out, "apply", "-n", ns, "-f", file); err != nil {
				t.Fatalf("the example of line %d does not apply: %v\n%s\nas applied:\n%s", e.Line, err, out.String(), manifest)
			}
			t.Logf("applied the example of line %d:\n%s", e.Line, strings.TrimSpace(out.String()))
			dynamic = append(dynamic, checkGuideExample(ctx, t, ns, e)...)
		})
	}
}

// checkGuideExample checks the claims and pods of one example and returns the volumes the
// provisioner made for its claims.
func checkGuideExample(ctx context.Context, t *testing.T, ns string, e guide.Example) []*corev1.PersistentVolume {
	t.Helper()
	applied := map[string]bool{}
	for _, o := range e.Objects {
		if o.GetKind() == "PersistentVolume" {
			applied[o.GetName()] = true
		}
	}
	var dynamic []*corev1.PersistentVolume
	for _, o := range e.Objects {
		if o.GetKind() != "PersistentVolumeClaim" {
			continue
		}
		pv := boundVolume(ctx, t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.GetName()}})
		if !applied[pv.Name] {
			dynamic = append(dynamic, pv)
		}
		if pv.Spec.CSI == nil {
			t.Fatalf("claim %s is bound to %s, which is no CSI volume", o.GetName(), pv.Name)
		}
		bucket := pv.Spec.CSI.VolumeAttributes["bucketName"]
		eventually(ctx, t, "object "+helloKey+" of claim "+o.GetName()+"'s bucket "+bucket, func() error {
			got, err := objectE(ctx, bucket, helloKey)
			if err != nil {
				return err
			}
			if strings.TrimSpace(got) != helloText {
				return fmt.Errorf("it holds %q, want %q", got, helloText)
			}
			return nil
		})
	}
	for _, o := range e.Objects {
		if o.GetKind() != "Pod" {
			continue
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.GetName()}}
		waitRunning(ctx, t, pod)
		eventually(ctx, t, "pod "+pod.Name+" prints "+helloKey, func() error {
			if log := podLog(ctx, t, pod); !strings.Contains(log, helloText) {
				return fmt.Errorf("its log is %q, want it to show %q", log, helloText)
			}
			return nil
		})
		var events corev1.EventList
		if err := k8s.List(ctx, &events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == pod.Name && (ev.Reason == "MountOptionsIgnored" || ev.Reason == "InvalidVolume") {
				t.Errorf("pod %s got a %s Warning: %s", pod.Name, ev.Reason, ev.Message)
			}
		}
	}
	return dynamic
}

// deleteGuideObjects waits for the csi-controller to delete the dynamic volumes, then deletes
// the cluster-scoped objects the examples made: the StorageClass only once no volume of it is
// left. It reports what fails and goes on, so that one stuck volume leaves nothing else behind.
func deleteGuideObjects(t *testing.T, objs []*unstructured.Unstructured, dynamic []*corev1.PersistentVolume) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, pv := range dynamic {
		for {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(pv), &corev1.PersistentVolume{})
			if apierrors.IsNotFound(err) {
				break
			}
			if ctx.Err() != nil {
				t.Errorf("the dynamic volume %s (bucket %s) is not deleted 3 minutes after its claim (%v): the guide says "+
					"its StorageClass deletes the bucket with the claim; see kubectl describe pv %s", pv.Name, pv.Spec.CSI.VolumeAttributes["bucketName"], err, pv.Name)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, o := range objs {
		if err := k8s.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}
