package chart

import (
	"encoding/base64"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

const ownershipKeysSecret = "s3csi-ownership-keys"

func TestOwnershipKeysRendering(t *testing.T) {
	t.Run("the chart generates a key of 64 characters and the csi-controller reads every key of the Secret", func(t *testing.T) {
		objs := render(t, "default")
		secret := find(objs, "Secret", ownershipKeysSecret)
		if secret == nil {
			t.Fatalf("no Secret %s", ownershipKeysSecret)
		}
		if secret.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Error("the Secret would be deleted by helm uninstall, and with it the proof of every bucket")
		}
		data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
		key, err := base64.StdEncoding.DecodeString(data["key"])
		if err != nil || len(key) < 64 {
			t.Errorf("key is %d bytes (decode error %v), want 64", len(key), err)
		}
		assertReadsOwnershipKeys(t, objs, ownershipKeysSecret)
	})
	t.Run("with an existing Secret the chart renders none and mounts that one", func(t *testing.T) {
		out, err := helmTemplate(t, "--set", "s3.endpointUrl=https://s3.example.com", "--set", "controller.ownershipKeys.existingSecret=my-keys")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), ownershipKeysSecret) {
			t.Errorf("the rendering holds %s with an existing Secret", ownershipKeysSecret)
		}
		assertReadsOwnershipKeys(t, decode(t, out), "my-keys")
	})
}

func assertReadsOwnershipKeys(t *testing.T, objs []*unstructured.Unstructured, secret string) {
	t.Helper()
	d := find(objs, "Deployment", "s3csi-controller")
	c := containers(t, d)[0]
	if !slices.Contains(args(c), "--ownership-keys-dir=/etc/s3csi/ownership-keys") {
		t.Errorf("csi-controller args = %v, want --ownership-keys-dir", args(c))
	}
	vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		m, _ := v.(map[string]any)
		if m["name"] != "ownership-keys" {
			continue
		}
		name, _, _ := unstructured.NestedString(m, "secret", "secretName")
		items, _, _ := unstructured.NestedSlice(m, "secret", "items")
		optional, _, _ := unstructured.NestedBool(m, "secret", "optional")
		if name != secret || len(items) != 0 || optional {
			t.Errorf("ownership-keys volume = %v, want every key of %s, required", m, secret)
		}
		return
	}
	t.Error("the csi-controller mounts no ownership-keys volume")
}

// TestOwnershipKeysSurviveUpgradeAndUninstall installs the chart on a real API server: the
// generated key, and a key an operator added for a rotation, are kept by helm upgrade, and the
// Secret outlives helm uninstall so that a reinstalled driver still proves its buckets. The
// generated NATS CA and certificate are kept by helm upgrade too, so running services keep
// trusting the servers.
func TestOwnershipKeysSurviveUpgradeAndUninstall(t *testing.T) {
	api := testenv.StartAPIServer(t)
	kubeconfig := api.KubeconfigFile(t)
	helm := helmOn(t, kubeconfig)
	secretData := func(name string) map[string][]byte {
		t.Helper()
		var s corev1.Secret
		if err := api.Client.Get(t.Context(), client.ObjectKey{Namespace: releaseNamespace, Name: name}, &s); err != nil {
			t.Fatalf("get Secret %s: %v", name, err)
		}
		return s.Data
	}
	keys := func() map[string][]byte { t.Helper(); return secretData(ownershipKeysSecret) }
	values := filepath.Join(chartDir(t), "ci", "default-values.yaml")

	helm("install", releaseName, chartDir(t), "--create-namespace", "--values", values)
	first := keys()
	natsTLS := secretData("s3csi-nats-tls")
	if len(first["key"]) < 64 {
		t.Fatalf("installed key is %d bytes", len(first["key"]))
	}

	// A rotation as docs/csi-controller.md describes it: the old key kept under another name.
	var s corev1.Secret
	if err := api.Client.Get(t.Context(), client.ObjectKey{Namespace: releaseNamespace, Name: ownershipKeysSecret}, &s); err != nil {
		t.Fatal(err)
	}
	s.Data["previous-1"] = s.Data["key"]
	s.Data["key"] = []byte(strings.Repeat("n", 64))
	if err := api.Client.Update(t.Context(), &s); err != nil {
		t.Fatal(err)
	}
	helm("upgrade", releaseName, chartDir(t), "--values", values)
	if got := keys(); string(got["key"]) != strings.Repeat("n", 64) || string(got["previous-1"]) != string(first["key"]) {
		t.Errorf("after helm upgrade the keys are %d, want the rotated key and the previous one kept", len(got))
	}
	if got := secretData("s3csi-nats-tls"); len(natsTLS["ca.crt"]) == 0 ||
		string(got["ca.crt"]) != string(natsTLS["ca.crt"]) || string(got["tls.key"]) != string(natsTLS["tls.key"]) {
		t.Error("helm upgrade generated a new NATS CA or key: running services would stop trusting the servers")
	}

	helm("uninstall", releaseName)
	after := keys()
	assertNamespaceKept(t.Context(), t, api, mppod.DefaultNamespace)
	helm("install", releaseName, chartDir(t), "--values", values)
	if got := keys(); string(got["key"]) != string(after["key"]) || string(got["previous-1"]) != string(first["key"]) {
		t.Error("a reinstall replaced the keys that survived helm uninstall")
	}
}
