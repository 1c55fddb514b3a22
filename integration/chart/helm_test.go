package chart

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/s3csi/s3csi/shared/testenv"
)

// Release name, namespace and Kubernetes version every rendering uses, so golden files are
// stable; the version is the one the project's clusters run (testenv.KubernetesVersion).
const (
	releaseName      = "s3csi"
	releaseNamespace = "s3csi-system"
)

// helmPath finds the pinned helm: $S3CSI_HELM when set, else bin/helm in the repository.
func helmPath(t *testing.T) string {
	t.Helper()
	path := os.Getenv("S3CSI_HELM")
	if path == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(root, "bin", "helm")
	}
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		t.Fatalf("%s is missing: run `make tools` (or `make bin/helm`) from the repository root, or set S3CSI_HELM", path)
	}
	return path
}

// chartDir is charts/s3csi of the repository.
func chartDir(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "charts", "s3csi")
}

// helmTemplate runs `helm template` on the chart with args appended (values files, --set) and
// returns stdout, or an error carrying stderr.
func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	return helmTemplateChart(t, chartDir(t), args...)
}

// helmTemplateChart is helmTemplate on the chart in dir (a copy of charts/s3csi).
func helmTemplateChart(t *testing.T, dir string, args ...string) ([]byte, error) {
	t.Helper()
	base := []string{
		"template", releaseName, dir, "--namespace", releaseNamespace,
		"--kube-version", testenv.KubernetesVersion,
	}
	cmd := exec.CommandContext(t.Context(), helmPath(t), append(base, args...)...)
	// No repository cache or plugin of the user's may change the rendering.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("helm template %v: %w: %s", args, err, stderr.String())
		}
		return nil, fmt.Errorf("run helm: %w", err)
	}
	return stdout.Bytes(), nil
}
