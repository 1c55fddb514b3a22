package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Versions of the Kubernetes binaries and etcd; hack/kube-bins.sh builds the same ones by default.
const (
	KubernetesVersion = "v1.34.4"
	EtcdVersion       = "v3.6.5"
)

// RepoRoot finds the repository root (the directory holding go.work) from the working
// directory, so tests find the generated CRDs and built tools from any package.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.work in any parent of the working directory")
		}
		dir = parent
	}
}

// CacheDir is where built binaries are kept across runs: $S3CSI_CACHE_DIR, else
// $XDG_CACHE_HOME/s3csi, else ~/.cache/s3csi (as hack/kube-bins.sh uses).
func CacheDir() (string, error) {
	if dir := os.Getenv("S3CSI_CACHE_DIR"); dir != "" {
		return dir, nil
	}
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" {
		return filepath.Join(dir, "s3csi"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find cache dir: %w", err)
	}
	return filepath.Join(home, ".cache", "s3csi"), nil
}

// EnvtestAssetsDir is the directory holding kube-apiserver and etcd: $KUBEBUILDER_ASSETS when
// set, else the cache directory that `make envtest-bins` fills (hack/kube-bins.sh, which also
// builds the cluster's binaries there: each Kubernetes binary is built once).
func EnvtestAssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "kube", "k8s-"+KubernetesVersion+"-etcd-"+EtcdVersion), nil
}

// toolPath finds a pinned tool: $envVar when set, else bin/<name> in the repository.
func toolPath(envVar, name string) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin", name), nil
}

func requireExecutable(path, install string) error {
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is missing: run `%s` from the repository root", path, install)
	}
	return nil
}
