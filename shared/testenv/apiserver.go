package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// APIServer is a real kube-apiserver and etcd with the s3csi CRDs installed.
type APIServer struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a client for Config with Scheme.
	Client client.Client
	// Scheme knows the built-in types and the s3csi API.
	Scheme *runtime.Scheme

	env *envtest.Environment
}

// NewScheme returns a scheme with the Kubernetes built-in types, CRDs and the s3csi API.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("add built-in types to scheme: %w", err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("add CRD types to scheme: %w", err)
	}
	if err := s3csiv2.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("add s3csi types to scheme: %w", err)
	}
	return scheme, nil
}

// StartAPIServerE starts kube-apiserver and etcd from the binaries `make envtest-bins` built and
// installs the CRDs from charts/s3csi/crds (the generated, only copy).
func StartAPIServerE() (*APIServer, error) {
	assets, err := EnvtestAssetsDir()
	if err != nil {
		return nil, err
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if err := requireExecutable(filepath.Join(assets, bin), "make envtest-bins"); err != nil {
			return nil, fmt.Errorf("find envtest binaries (kube-apiserver %s, etcd %s, built from source once): %w",
				KubernetesVersion, EtcdVersion, err)
		}
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "charts", "s3csi", "crds")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest API server: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("create API client: %w", err)
	}
	return &APIServer{Config: cfg, Client: c, Scheme: scheme, env: env}, nil
}

// StartAPIServer starts an API server for the test and stops it when the test ends.
func StartAPIServer(t testing.TB) *APIServer {
	t.Helper()
	s, err := StartAPIServerE()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop API server: %v", err)
		}
	})
	return s
}

// Stop stops kube-apiserver and etcd and removes their data.
func (s *APIServer) Stop() error {
	if err := s.env.Stop(); err != nil {
		return fmt.Errorf("stop envtest API server: %w", err)
	}
	return nil
}

// Kubeconfig writes a kubeconfig for the API server to path, for kubectl and services run by hand.
func (s *APIServer) Kubeconfig(path string) error {
	admin := envtest.User{Name: "s3csi-admin", Groups: []string{"system:masters"}}
	user, err := s.env.ControlPlane.AddUser(admin, nil)
	if err != nil {
		return fmt.Errorf("add API server user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("render kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// KubeconfigFile writes a kubeconfig for the API server into a temporary directory of t and
// returns its path, for a service binary's --kubeconfig.
func (s *APIServer) KubeconfigFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.Kubeconfig(path); err != nil {
		t.Fatal(err)
	}
	return path
}
