package chart

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/integration/scality"
)

// scalityRelease is the release the Scality driver's chart is installed as in its docs.
const scalityRelease = scality.Release

// helmOn returns a function running the pinned helm against kubeconfig in releaseNamespace,
// failing the test on an error.
func helmOn(t *testing.T, kubeconfig string) func(args ...string) {
	return func(args ...string) {
		t.Helper()
		if out, err := helmRun(t, kubeconfig, args...); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// helmRun runs the pinned helm against kubeconfig in releaseNamespace.
func helmRun(t *testing.T, kubeconfig string, args ...string) ([]byte, error) {
	t.Helper()
	return helmRunIn(t, kubeconfig, releaseNamespace, args...)
}

// helmRunIn runs the pinned helm against kubeconfig in namespace.
func helmRunIn(t *testing.T, kubeconfig, namespace string, args ...string) ([]byte, error) {
	t.Helper()
	base := []string{"--kubeconfig", kubeconfig, "--namespace", namespace}
	cmd := exec.CommandContext(t.Context(), helmPath(t), append(args, base...)...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	return cmd.CombinedOutput()
}

// assertNamespaceKept checks that namespace name exists and is not being deleted.
func assertNamespaceKept(ctx context.Context, t *testing.T, api *testenv.APIServer, name string) *corev1.Namespace {
	t.Helper()
	var ns corev1.Namespace
	if err := api.Client.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
		t.Fatalf("namespace %s: %v; its Mountpoint Pods and their live mounts would be gone", name, err)
	}
	if ns.DeletionTimestamp != nil {
		t.Fatalf("namespace %s is being deleted; its Mountpoint Pods and their live mounts would be gone", name)
	}
	return &ns
}

// TestTheMountpointNamespaceOutlivesEveryRelease: Mountpoint Pods serve live mounts, so no
// uninstall deletes their namespace. The Scality driver's chart leaves it (once told to keep
// it) with its own release's ownership; s3csi's install then uses it as it is instead of failing
// on that ownership, and its uninstall leaves it too. A namespace s3csi created is kept by its
// uninstall and adopted again by a reinstall.
func TestTheMountpointNamespaceOutlivesEveryRelease(t *testing.T) {
	api := testenv.StartAPIServer(t)
	kubeconfig := api.KubeconfigFile(t)
	values := filepath.Join(chartDir(t), "ci", "default-values.yaml")
	ns := mppod.DefaultNamespace

	t.Run("a namespace the Scality driver's release left is used as it is", func(t *testing.T) {
		ctx := t.Context()
		helm := helmOn(t, kubeconfig)
		scality := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns,
			Labels: map[string]string{
				"app.kubernetes.io/managed-by":       "Helm",
				"pod-security.kubernetes.io/enforce": "restricted",
			},
			Annotations: map[string]string{
				"meta.helm.sh/release-name":      scalityRelease,
				"meta.helm.sh/release-namespace": "kube-system",
				"helm.sh/resource-policy":        "keep",
			},
		}}
		if err := api.Client.Create(t.Context(), scality); err != nil {
			t.Fatal(err)
		}
		out, err := helmRun(t, kubeconfig, "install", releaseName, chartDir(t), "--create-namespace", "--values", values)
		if err != nil {
			t.Fatalf("helm install beside the Scality driver's namespace: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "Namespace "+ns+" existed (Helm release "+scalityRelease+")") {
			t.Errorf("NOTES do not say that %s is used as it is:\n%s", ns, out)
		}
		got := assertNamespaceKept(ctx, t, api, ns)
		if owner := got.Annotations["meta.helm.sh/release-name"]; owner != scalityRelease {
			t.Errorf("the install took namespace %s over (release %q): a roll-back to the Scality driver could not adopt it", ns, owner)
		}
		helm("uninstall", releaseName)
		assertNamespaceKept(ctx, t, api, ns)
	})

	t.Run("a namespace s3csi created outlives its uninstall and is adopted by a reinstall", func(t *testing.T) {
		ctx := t.Context()
		helm := helmOn(t, kubeconfig)
		var existing corev1.Namespace
		if err := api.Client.Get(t.Context(), client.ObjectKey{Name: ns}, &existing); err != nil {
			t.Fatal(err)
		}
		if err := api.Client.Delete(t.Context(), &existing); err != nil {
			t.Fatal(err)
		}
		finishNamespaceDeletion(t, api, ns)
		helm("install", releaseName, chartDir(t), "--values", values)
		got := assertNamespaceKept(ctx, t, api, ns)
		if got.Annotations["meta.helm.sh/release-name"] != releaseName || got.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Fatalf("namespace %s has annotations %v, want release %s's with resource-policy keep", ns, got.Annotations, releaseName)
		}
		helm("uninstall", releaseName)
		assertNamespaceKept(ctx, t, api, ns)
		helm("install", releaseName, chartDir(t), "--values", values)
		helm("upgrade", releaseName, chartDir(t), "--values", values)
		assertNamespaceKept(ctx, t, api, ns)
	})
}

// finishNamespaceDeletion does what the namespace controller, absent from a bare API server,
// does once a namespace is empty: it clears its finalizers, and waits until it is gone.
func finishNamespaceDeletion(t *testing.T, api *testenv.APIServer, name string) {
	t.Helper()
	var ns corev1.Namespace
	if err := api.Client.Get(t.Context(), client.ObjectKey{Name: name}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if err := api.Client.SubResource("finalize").Update(t.Context(), &ns); err != nil {
		t.Fatalf("finalize namespace %s: %v", name, err)
	}
	testenv.Eventually(t, 10*time.Second, "namespace "+name+" to be gone", func() bool {
		return apierrors.IsNotFound(api.Client.Get(t.Context(), client.ObjectKey{Name: name}, &ns))
	})
}

// TestTheJanitorMayUpgradeTheAttachmentCRDOnly: the chart grants the janitor what
// s3csiv2.ApplyCRD needs on the attachment CRD, and nothing on any other CRD.
func TestTheJanitorMayUpgradeTheAttachmentCRDOnly(t *testing.T) {
	api := testenv.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := api.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(api.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + releaseNamespace + ":s3csi-janitor",
		Groups:   append([]string{"system:authenticated"}, serviceAccountGroups(releaseNamespace)...),
	}
	janitor, err := client.New(cfg, client.Options{Scheme: api.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s3csiv2.ApplyCRD(ctx, janitor); !apierrors.IsForbidden(err) {
		t.Fatalf("without the chart's RBAC the janitor's apply got %v, want forbidden", err)
	}

	objs := render(t, "default")
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
		o := find(objs, kind, "s3csi-janitor")
		if o == nil {
			t.Fatalf("the chart renders no %s s3csi-janitor", kind)
		}
		if err := api.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the janitor to apply the attachment CRD", func() bool {
		err = s3csiv2.ApplyCRD(ctx, janitor)
		return err == nil
	})
	crd, err := s3csiv2.CRD()
	if err != nil {
		t.Fatal(err)
	}
	crd.SetName("other.s3.csi.scality.com")
	if err := janitor.Patch(ctx, crd, client.Apply, client.FieldOwner(s3csiv2.CRDFieldOwner), client.ForceOwnership); !apierrors.IsForbidden(err) {
		t.Errorf("the janitor's apply of another CRD got %v, want forbidden", err)
	}
}

// scalityChart writes a chart shaped as the Scality driver 2.2's (scality.WriteChart) and
// returns its directory.
func scalityChart(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := scality.WriteChart(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTheSwitchFromScalityAndBackKeepsTheMountpointPods runs the runbook of
// docs/migrating-from-scality.md on a real API server, against a release shaped as the Scality
// driver 2.2's: its one extra step (an upgrade through kubectl s3csi migrate keep-namespaces)
// makes its uninstall leave the Mountpoint namespace and its pods; s3csi installs beside them
// and the janitor's apply upgrades the CRD Helm kept; the roll-back (s3csi uninstalled, the
// Scality release installed again) keeps them too.
func TestTheSwitchFromScalityAndBackKeepsTheMountpointPods(t *testing.T) {
	api := testenv.StartAPIServer(t)
	kubeconfig := api.KubeconfigFile(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := scality.BuildPlugin(t.Context(), root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	chart := scalityChart(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ns := mppod.DefaultNamespace
	scalityHelm := func(args ...string) {
		t.Helper()
		if out, err := helmRunIn(t, kubeconfig, scality.Namespace, args...); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	s3csi := helmOn(t, kubeconfig)
	values := filepath.Join(chartDir(t), "ci", "default-values.yaml")

	// The attachment CRD of the API server is s3csi's; the Scality release's is older. Helm
	// installs crds/ only when absent.
	if err := api.Client.Delete(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: s3csiv2.CRDName}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the CRD to be gone", func() bool {
		return apierrors.IsNotFound(api.Client.Get(ctx, client.ObjectKey{Name: s3csiv2.CRDName}, &apiextensionsv1.CustomResourceDefinition{}))
	})
	if err := api.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	scalityHelm("install", scalityRelease, chart)
	mountpointPod := fixture.MountpointPod("mp-scality", "")
	if err := api.Client.Create(ctx, mountpointPod); err != nil {
		t.Fatal(err)
	}
	stillServing := func(step string) {
		t.Helper()
		assertNamespaceKept(ctx, t, api, ns)
		var p corev1.Pod
		if err := api.Client.Get(ctx, client.ObjectKeyFromObject(mountpointPod), &p); err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("after %s the Mountpoint Pod is gone or going (%v): its live mounts would fail", step, err)
		}
	}

	// The switch: the one step on the Scality side, its uninstall, s3csi's install.
	scalityHelm(append([]string{"upgrade", scalityRelease, chart}, scality.KeepArgs(plugin)...)...)
	scalityHelm("uninstall", scalityRelease)
	stillServing("the Scality release's uninstall")
	s3csi("install", releaseName, chartDir(t), "--create-namespace", "--values", values)
	stillServing("s3csi's install")

	oa := openAPI(t, api)
	if err := s3csiv2.CheckCRD(ctx, api.Client, oa); !errors.Is(err, s3csiv2.ErrCRDOutdated) {
		t.Fatalf("the CRD Helm kept: %v, want it outdated", err)
	}
	if err := s3csiv2.ApplyCRD(ctx, api.Client); err != nil { // as the janitor does at start
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the upgraded CRD to pass the services' check", func() bool {
		return s3csiv2.CheckCRD(ctx, api.Client, oa) == nil
	})

	// The roll-back: s3csi's uninstall keeps the namespace; the Scality release adopts it again.
	s3csi("uninstall", releaseName)
	stillServing("s3csi's uninstall")
	scalityHelm("install", scalityRelease, chart)
	stillServing("the Scality release's reinstall")
}

func openAPI(t *testing.T, api *testenv.APIServer) openapi.Client {
	t.Helper()
	d, err := discovery.NewDiscoveryClientForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	return d.OpenAPIV3()
}
