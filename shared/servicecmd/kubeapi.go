package servicecmd

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeAPIOptions bound a service's request rate to the API server (client-go's client-side
// limiter). A service that leaves them unset gets client-go's 5 requests per second, which
// holds a node's burst of publishes back by seconds; each service sets its own defaults.
type KubeAPIOptions struct {
	// KubeAPIQPS is the sustained rate, in requests per second.
	KubeAPIQPS float32
	// KubeAPIBurst is how many requests may go above that rate at once.
	KubeAPIBurst int
}

// AddFlags registers --kube-api-qps and --kube-api-burst on fs, with the current values as
// defaults.
func (o *KubeAPIOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "sustained requests per second to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "requests to the API server allowed in a burst above --kube-api-qps")
}

// Validate reports each invalid value, naming its flag.
func (o *KubeAPIOptions) Validate() []error {
	var errs []error
	if o.KubeAPIQPS <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v must be positive", o.KubeAPIQPS))
	}
	if o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst %d must be at least 1", o.KubeAPIBurst))
	}
	return errs
}

// ApplyRateLimit sets the rate limit on cfg.
func (o *KubeAPIOptions) ApplyRateLimit(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
}

// RESTConfig loads the kubeconfig at path, or the in-cluster configuration when path is empty,
// and names the client userAgent in the API server's logs and audit.
func RESTConfig(path, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("load Kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}
