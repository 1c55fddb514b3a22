package chart

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// s3CAFile is where the csi-controller and the node-agent read the S3 endpoint's CA.
const s3CAFile = "/etc/s3csi/s3-ca/ca.crt"

// testCAPEM writes a self-signed CA certificate as PEM into a temporary file and returns its
// path and content.
func testCAPEM(t *testing.T) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ring-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	data := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// s3CAVolume returns the configMap source of the s3-ca volume of a workload object, nil when it
// has none.
func s3CAVolume(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	vols, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if m, ok := v.(map[string]any); ok && m["name"] == "s3-ca" {
			cm, _ := m["configMap"].(map[string]any)
			return cm
		}
	}
	return nil
}

// assertReadsS3CA checks that the csi-controller and the node-agent read the CA from key of
// ConfigMap configMap (none when configMap is empty).
func assertReadsS3CA(t *testing.T, objs []*unstructured.Unstructured, configMap, key string) {
	t.Helper()
	for _, w := range []struct{ kind, name string }{{"Deployment", "s3csi-controller"}, {"DaemonSet", "s3csi-node-agent"}} {
		o := find(objs, w.kind, w.name)
		if o == nil {
			t.Fatalf("no %s %s", w.kind, w.name)
		}
		c := containers(t, o)[0]
		hasFlag := slices.Contains(args(c), "--s3-ca-bundle="+s3CAFile)
		vol := s3CAVolume(t, o)
		if configMap == "" {
			if hasFlag || vol != nil {
				t.Errorf("%s reads a CA although none is set: args %v, volume %v", w.name, args(c), vol)
			}
			continue
		}
		if !hasFlag {
			t.Errorf("%s args = %v, want --s3-ca-bundle=%s", w.name, args(c), s3CAFile)
		}
		if vol == nil {
			t.Fatalf("%s has no s3-ca volume", w.name)
		}
		items, _ := vol["items"].([]any)
		item, _ := func() (map[string]any, bool) {
			if len(items) != 1 {
				return nil, false
			}
			m, ok := items[0].(map[string]any)
			return m, ok
		}()
		if vol["name"] != configMap || item["key"] != key || item["path"] != "ca.crt" {
			t.Errorf("%s s3-ca volume = %v, want key %s of ConfigMap %s as ca.crt", w.name, vol, key, configMap)
		}
		mounted := false
		for _, m := range c["volumeMounts"].([]any) {
			if vm, ok := m.(map[string]any); ok && vm["name"] == "s3-ca" && vm["mountPath"] == filepath.Dir(s3CAFile) {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s does not mount the s3-ca volume at %s", w.name, filepath.Dir(s3CAFile))
		}
	}
}

func TestS3CARendering(t *testing.T) {
	const endpoint = "s3.endpointUrl=https://s3.ring.internal"
	caFile, caPEM := testCAPEM(t)
	renderWith := func(t *testing.T, args ...string) []*unstructured.Unstructured {
		t.Helper()
		out, err := helmTemplate(t, append([]string{"--set", endpoint}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return decode(t, out)
	}
	assertChartConfigMap := func(t *testing.T, objs []*unstructured.Unstructured) {
		t.Helper()
		cm := find(objs, "ConfigMap", "s3csi-s3-ca")
		if cm == nil {
			t.Fatal("no ConfigMap s3csi-s3-ca")
		}
		if cm.GetNamespace() != releaseNamespace {
			t.Errorf("ConfigMap s3csi-s3-ca is in namespace %q, want the release namespace", cm.GetNamespace())
		}
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		if strings.TrimSpace(data["ca.crt"]) != strings.TrimSpace(caPEM) {
			t.Errorf("ConfigMap s3csi-s3-ca ca.crt = %q, want the given PEM", data["ca.crt"])
		}
	}
	t.Run("without a CA nothing reads one", func(t *testing.T) {
		objs := render(t, "default")
		assertReadsS3CA(t, objs, "", "")
		if find(objs, "ConfigMap", "s3csi-s3-ca") != nil {
			t.Error("a ConfigMap s3csi-s3-ca is rendered without a CA")
		}
	})
	t.Run("s3.caBundle becomes the chart's ConfigMap, which the controller and the node-agent read", func(t *testing.T) {
		objs := renderWith(t, "--set-file", "s3.caBundle="+caFile)
		assertChartConfigMap(t, objs)
		assertReadsS3CA(t, objs, "s3csi-s3-ca", "ca.crt")
		for _, o := range objs {
			if o.GetKind() == "ConfigMap" && o.GetNamespace() != releaseNamespace {
				t.Errorf("ConfigMap %s/%s rendered outside the release namespace: the CA reaches mounters with the mount request", o.GetNamespace(), o.GetName())
			}
		}
		d := find(objs, "Deployment", "s3csi-controller")
		if a, _, _ := unstructured.NestedString(d.Object, "spec", "template", "metadata", "annotations", "checksum/s3-ca"); a == "" {
			t.Error("the csi-controller's pods carry no checksum/s3-ca annotation: a new CA would not restart them")
		}
	})
	t.Run("s3.caConfigMap is read from its key ca.crt, and the chart renders no ConfigMap", func(t *testing.T) {
		objs := render(t, "private-ca")
		assertReadsS3CA(t, objs, "ring-ca", "ca.crt")
		if find(objs, "ConfigMap", "s3csi-s3-ca") != nil {
			t.Error("a ConfigMap s3csi-s3-ca is rendered for an existing ConfigMap")
		}
	})
	t.Run("Scality v2's tls.caCertConfigMap is read from its key ca-bundle.crt", func(t *testing.T) {
		assertReadsS3CA(t, renderWith(t, "--set", "tls.caCertConfigMap=s3-ca-cert"), "s3-ca-cert", "ca-bundle.crt")
	})
	t.Run("Scality v2's tls.caCertData, alone or with tls.caCertConfigMap, is the chart's ConfigMap", func(t *testing.T) {
		for _, extra := range [][]string{nil, {"--set", "tls.caCertConfigMap=s3-ca-cert"}} {
			objs := renderWith(t, append([]string{"--set-file", "tls.caCertData=" + caFile}, extra...)...)
			assertChartConfigMap(t, objs)
			assertReadsS3CA(t, objs, "s3csi-s3-ca", "ca.crt")
		}
	})
}

func TestS3CAValuesAreRefused(t *testing.T) {
	caFile, _ := testCAPEM(t)
	big := filepath.Join(t.TempDir(), "big.pem")
	pemData, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, []byte(strings.Repeat(string(pemData), 33<<10/len(pemData)+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		args      []string
		wantInErr []string
	}{
		{"s3.caBundle with Scality's tls.caCertData is refused naming both",
			[]string{"--set-file", "s3.caBundle=" + caFile, "--set-file", "tls.caCertData=" + caFile},
			[]string{"s3.caBundle and tls.caCertData both give the S3 endpoint's CA", "set only s3.caBundle"}},
		{"s3.caConfigMap with Scality's tls.caCertConfigMap is refused naming both",
			[]string{"--set", "s3.caConfigMap=a", "--set", "tls.caCertConfigMap=b"},
			[]string{"s3.caConfigMap and tls.caCertConfigMap both give the S3 endpoint's CA"}},
		{"s3.caBundle with Scality's tls.caCertConfigMap is refused naming both",
			[]string{"--set-file", "s3.caBundle=" + caFile, "--set", "tls.caCertConfigMap=b"},
			[]string{"s3.caBundle and tls.caCertConfigMap both give"}},
		{"s3.caBundle with s3.caConfigMap is refused",
			[]string{"--set-file", "s3.caBundle=" + caFile, "--set", "s3.caConfigMap=a"},
			[]string{"s3.caBundle and s3.caConfigMap both give the S3 endpoint's CA: set one"}},
		{"an s3.caBundle that holds no certificate is refused by the schema",
			[]string{"--set", "s3.caBundle=ca.pem"}, []string{"/s3/caBundle"}},
		{"an s3.caBundle over 32 KiB is refused by the schema",
			[]string{"--set-file", "s3.caBundle=" + big}, []string{"/s3/caBundle"}},
		{"a tls.caCertData that holds no certificate is refused by the schema",
			[]string{"--set", "tls.caCertData=x"}, []string{"/tls/caCertData"}},
		{"an s3.caConfigMap that is not a name is refused by the schema",
			[]string{"--set", "s3.caConfigMap=My_CA"}, []string{"/s3/caConfigMap"}},
		{"Scality's tls.initImage is refused: no init container is needed",
			[]string{"--set", "tls.initImage.tag=3.21"}, []string{"initImage"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helmTemplate(t, append([]string{"--set", "s3.endpointUrl=https://s3.ring.internal"}, tc.args...)...)
			if err == nil {
				t.Fatalf("helm template accepted the values; rendered %d bytes", len(out))
			}
			for _, want := range tc.wantInErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not name %q:\n%v", want, err)
				}
			}
		})
	}
}
