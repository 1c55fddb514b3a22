// Package scality stands in for the Scality CSI Driver for S3 v2.2 where a switch to s3csi, or
// back, touches it (a chart shaped as its chart: WriteChart, CRD), and holds what the runbook
// runs (BuildPlugin, KeepArgs). The chart and e2e tests run docs/migrating-from-scality.md
// against them.
package scality

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// Release and Namespace are the release name and namespace of Scality's install docs.
const (
	Release   = "scality-mountpoint-s3-csi-driver"
	Namespace = "kube-system"
)

// CRD returns the attachment CRD as Scality's chart installs it: s3csi's without readOnly and
// without selectable fields.
func CRD() (*unstructured.Unstructured, error) {
	crd, err := s3csiv2.CRD()
	if err != nil {
		return nil, err
	}
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil {
		return nil, err
	}
	for _, v := range versions {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("a CRD version is %T", v)
		}
		delete(m, "selectableFields")
		unstructured.RemoveNestedField(m, "schema", "openAPIV3Schema", "properties", "spec", "properties", "readOnly")
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		return nil, err
	}
	return crd, nil
}

// WriteChart writes into dir a chart shaped as Scality's 2.2 where a switch touches it: the
// Mountpoint namespace as a plain template (no keep policy), the CSIDriver, a
// cleanupCRDOnUninstall value, and in crds/ the attachment CRD (CRD).
func WriteChart(dir string) error {
	crd, err := CRD()
	if err != nil {
		return err
	}
	crdYAML, err := yaml.Marshal(crd.Object)
	if err != nil {
		return err
	}
	files := map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: " + Release + "\nversion: 2.2.0\nappVersion: 2.2.0\n",
		"values.yaml": "cleanupCRDOnUninstall: false\nmountpointPod:\n  namespace: mount-s3\n",
		"templates/mount-s3-namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {{ .Values.mountpointPod.namespace }}\n" +
			"  labels:\n    pod-security.kubernetes.io/enforce: restricted\n",
		"templates/csidriver.yaml": "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n  name: s3.csi.scality.com\n" +
			"spec:\n  attachRequired: false\n  podInfoOnMount: true\n  requiresRepublish: true\n",
		"crds/mountpoints3podattachments.yaml": string(crdYAML),
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// BuildPlugin builds the kubectl s3csi plugin (whose `migrate keep-namespaces` the runbook runs
// as a Helm post-renderer) from the repository at root into dir and returns its path.
func BuildPlugin(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "kubectl-s3csi")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/kubectl-s3csi")
	cmd.Dir = filepath.Join(root, "cli")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build kubectl-s3csi: %w\n%s", err, out)
	}
	return bin, nil
}

// KeepArgs are the arguments of the runbook's `helm upgrade` of Scality's release that make its
// uninstall keep the Mountpoint namespace, with plugin the path of kubectl-s3csi.
func KeepArgs(plugin string) []string {
	return []string{"--reuse-values", "--set", "cleanupCRDOnUninstall=false",
		"--post-renderer", plugin, "--post-renderer-args", "migrate", "--post-renderer-args", "keep-namespaces"}
}
