package servicecmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
)

func TestKubeAPIOptionsFlagsValidateAndApply(t *testing.T) {
	o := KubeAPIOptions{KubeAPIQPS: 50, KubeAPIBurst: 100}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--kube-api-qps=7.5", "--kube-api-burst=9"}); err != nil {
		t.Fatal(err)
	}
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatalf("Validate() = %v", errs)
	}
	var cfg rest.Config
	o.ApplyRateLimit(&cfg)
	if cfg.QPS != 7.5 || cfg.Burst != 9 {
		t.Errorf("ApplyRateLimit: QPS %v, Burst %d; want 7.5, 9", cfg.QPS, cfg.Burst)
	}
	bad := KubeAPIOptions{}
	errs := bad.Validate()
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "--kube-api-qps") || !strings.Contains(errs[1].Error(), "--kube-api-burst") {
		t.Errorf("Validate() of zero values = %v, want both flags named", errs)
	}
}

func TestRESTConfigReadsTheKubeconfigAndNamesTheClient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := RESTConfig(path, "s3csi-test")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://10.0.0.1:6443" || cfg.UserAgent != "s3csi-test" {
		t.Errorf("RESTConfig = host %q, user agent %q", cfg.Host, cfg.UserAgent)
	}
	if _, err := RESTConfig(filepath.Join(t.TempDir(), "absent"), "x"); err == nil ||
		!strings.Contains(err.Error(), "load Kubernetes client configuration") {
		t.Errorf("RESTConfig of a missing file = %v", err)
	}
}
