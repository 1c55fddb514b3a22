package chart

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/s3csi/s3csi/shared/events"
)

// serviceWorkloads maps each service on the bus to its workload in the rendering.
var serviceWorkloads = map[events.Service][2]string{
	events.ServiceCSIController: {"Deployment", "s3csi-controller"},
	events.ServicePodReconciler: {"Deployment", "s3csi-pod-reconciler"},
	events.ServiceNodeAgent:     {"DaemonSet", "s3csi-node-agent"},
	events.ServiceJanitor:       {"Deployment", "s3csi-janitor"},
}

func TestNATSAuthentication(t *testing.T) {
	t.Run("the bundled NATS takes the users and permissions generated from shared/events", func(t *testing.T) {
		objs := render(t, "default")
		conf, _, _ := unstructured.NestedString(find(objs, "ConfigMap", "s3csi-nats").Object, "data", "nats.conf")
		if !strings.Contains(conf, events.AuthorizationConf()) {
			t.Errorf("nats.conf does not hold events.AuthorizationConf():\n%s", conf)
		}
		nats := containers(t, find(objs, "StatefulSet", "s3csi-nats"))[0]
		for _, s := range events.Users() {
			ref := secretKeyRef(nats, events.PasswordVariable(s))
			if ref != "s3csi-nats-auth/"+string(s) {
				t.Errorf("NATS reads %s from %q, want s3csi-nats-auth/%s", events.PasswordVariable(s), ref, s)
			}
		}
	})
	t.Run("the chart generates one password per user, kubectl s3csi's included, each starting with a letter", func(t *testing.T) {
		secret := find(render(t, "default"), "Secret", "s3csi-nats-auth")
		if secret == nil {
			t.Fatal("no Secret s3csi-nats-auth")
		}
		data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
		seen := map[string]bool{}
		for _, s := range events.Users() {
			pw, err := base64.StdEncoding.DecodeString(data[string(s)])
			if err != nil || len(pw) < 32 || pw[0] < 'a' || pw[0] > 'z' {
				t.Errorf("password of %s is %d bytes (decode error %v), want 32 or more starting with a letter", s, len(pw), err)
			}
			if seen[string(pw)] {
				t.Errorf("password of %s is shared with another service", s)
			}
			seen[string(pw)] = true
		}
	})
	for _, ci := range []string{"default", "external-nats"} {
		t.Run("in the "+ci+" rendering every service connects as its own user with only its own password", func(t *testing.T) {
			objs := render(t, ci)
			for s, w := range serviceWorkloads {
				o := find(objs, w[0], w[1])
				if o == nil {
					t.Fatalf("no %s %s", w[0], w[1])
				}
				c := containers(t, o)[0]
				if got, _ := envValue(c, "NATS_USER"); got != string(s) {
					t.Errorf("%s: NATS_USER = %q, want %q", w[1], got, s)
				}
				file, _ := envValue(c, "NATS_PASSWORD_FILE")
				if file != "/etc/s3csi/nats/password" {
					t.Errorf("%s: NATS_PASSWORD_FILE = %q", w[1], file)
				}
				keys := volumeKeys(o, "nats-auth")
				if len(keys) != 1 || keys[0] != string(s) {
					t.Errorf("%s mounts the keys %v of the NATS Secret, want only %s", w[1], keys, s)
				}
			}
		})
	}
	t.Run("with an external NATS over mutual TLS every service gets the CA and its client certificate", func(t *testing.T) {
		objs := render(t, "external-nats")
		for s, w := range serviceWorkloads {
			o := find(objs, w[0], w[1])
			c := containers(t, o)[0]
			for name, want := range map[string]string{
				"NATS_TLS_CA_FILE": "/etc/s3csi/nats-tls/ca.crt", "NATS_TLS_CERT_FILE": "/etc/s3csi/nats-tls/tls.crt",
				"NATS_TLS_KEY_FILE": "/etc/s3csi/nats-tls/tls.key",
			} {
				if got, _ := envValue(c, name); got != want {
					t.Errorf("%s (%s): %s = %q, want %q", w[1], s, name, got, want)
				}
			}
			if keys := volumeKeys(o, "nats-tls"); strings.Join(keys, ",") != "ca.crt,tls.crt,tls.key" {
				t.Errorf("%s mounts %v of the TLS Secret", w[1], keys)
			}
		}
	})
	t.Run("with authentication disabled no Secret nor user nor password is rendered", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(file, []byte("s3:\n  endpointUrl: https://s3.example.com\nnats:\n  auth:\n    enabled: false\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := helmTemplate(t, "--values", file)
		if err != nil {
			t.Fatal(err)
		}
		for _, word := range []string{"s3csi-nats-auth", "NATS_USER", "authorization {", "S3CSI_NATS_PASSWORD"} {
			if strings.Contains(string(out), word) {
				t.Errorf("the rendering holds %q with authentication disabled", word)
			}
		}
	})
}

// secretKeyRef returns "<secret>/<key>" of the env var name of container c.
func secretKeyRef(c map[string]any, name string) string {
	env, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range env {
		m, _ := e.(map[string]any)
		if m["name"] != name {
			continue
		}
		secret, _, _ := unstructured.NestedString(m, "valueFrom", "secretKeyRef", "name")
		key, _, _ := unstructured.NestedString(m, "valueFrom", "secretKeyRef", "key")
		return secret + "/" + key
	}
	return ""
}

// volumeKeys returns the keys the Secret volume name of o's pod projects.
func volumeKeys(o *unstructured.Unstructured, name string) []string {
	vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		m, _ := v.(map[string]any)
		if m["name"] != name {
			continue
		}
		items, _, _ := unstructured.NestedSlice(m, "secret", "items")
		var keys []string
		for _, it := range items {
			im, _ := it.(map[string]any)
			k, _ := im["key"].(string)
			keys = append(keys, k)
		}
		return keys
	}
	return nil
}
