package migrate

import (
	"bytes"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestKeepNamespacesAnnotatesNamespacesOnly(t *testing.T) {
	const configMap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c # a comment Helm wrote\ndata:\n  k: v\n"
	in := "---\n# Source: chart/templates/mount-s3-namespace.yaml\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: mount-s3\n" +
		"  labels:\n    pod-security.kubernetes.io/enforce: restricted\n---\n" + configMap +
		"---\n# Source: an empty template\n"
	var out bytes.Buffer
	n, err := KeepNamespaces(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("changed %d manifests, want 1", n)
	}
	docs := strings.Split(out.String(), "---\n")
	var ns struct {
		Metadata struct {
			Name        string            `json:"name"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if len(docs) < 3 {
		t.Fatalf("output:\n%s", out.String())
	}
	if err := yaml.Unmarshal([]byte(docs[1]), &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Metadata.Name != "mount-s3" || ns.Metadata.Annotations[KeepPolicy] != "keep" ||
		ns.Metadata.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("the Namespace became %+v, want mount-s3 with its labels and %s keep", ns.Metadata, KeepPolicy)
	}
	if docs[2] != configMap {
		t.Errorf("the ConfigMap became\n%q, want it byte for byte\n%q", docs[2], configMap)
	}
}

func TestKeepNamespacesRefusesWhatIsNotYAML(t *testing.T) {
	var out bytes.Buffer
	if _, err := KeepNamespaces(strings.NewReader("apiVersion: v1\nkind: [Namespace\n"), &out); err == nil {
		t.Error("a manifest that is not YAML was accepted")
	}
}
