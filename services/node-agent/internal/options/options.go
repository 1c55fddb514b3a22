// Package options holds the node-agent's command-line options: defaults, flags and the checks
// that reject a bad combination before anything starts.
package options

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/s3csi/s3csi/shared/admin"
	"github.com/s3csi/s3csi/shared/logging"
)

// Options configures one node-agent process.
type Options struct {
	// AdminAddr is the host:port of /healthz, /readyz and /metrics. Each service has its own
	// default port so that all four can run side by side on one development host.
	AdminAddr string
	// NodeName is the node this agent serves; it filters which pods, attachments and events are
	// its own. Defaults to $NODE_NAME, set from the downward API (spec.nodeName). Required.
	NodeName string
	// KubeletDir is the kubelet's root directory on the host, under which pod volumes and the
	// plugin's source mounts live.
	KubeletDir string
	// CSIEndpoint is the unix socket the kubelet dials.
	CSIEndpoint string
	// NATSURL lists the NATS servers, comma separated. Empty disables events: events are only
	// hints, so the system stays correct without them. Defaults to $NATS_URL.
	NATSURL string
	// Kubeconfig is a kubeconfig path for running outside a cluster; empty means in-cluster.
	Kubeconfig string
	// Logging holds --log-format and --log-level.
	Logging logging.Options
}

// New returns the defaults, taking downward-API and environment values (NODE_NAME, NATS_URL)
// from the environment.
func New() *Options {
	return &Options{
		AdminAddr:   ":8083",
		NodeName:    os.Getenv("NODE_NAME"),
		KubeletDir:  "/var/lib/kubelet",
		CSIEndpoint: "unix:///var/lib/kubelet/plugins/s3.csi.scality.com/csi.sock",
		NATSURL:     os.Getenv("NATS_URL"),
		Logging:     logging.NewOptions(),
	}
}

// AddFlags registers the options on fs, with the current values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.AdminAddr, "admin-address", o.AdminAddr, "host:port serving /healthz, /readyz and /metrics")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "name of the node this agent serves; required (env NODE_NAME)")
	fs.StringVar(&o.KubeletDir, "kubelet-dir", o.KubeletDir, "kubelet root directory on the host")
	fs.StringVar(&o.CSIEndpoint, "csi-endpoint", o.CSIEndpoint, "CSI gRPC endpoint, unix:///absolute/path")
	fs.StringVar(&o.NATSURL, "nats-url", o.NATSURL, "NATS server URLs, comma separated; empty disables events (env NATS_URL)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "path to a kubeconfig; empty uses the in-cluster configuration")
	o.Logging.AddFlags(fs)
}

// Validate reports every invalid option at once, naming the flag to fix.
func (o *Options) Validate() error {
	var errs []error
	if err := admin.ValidateAddr(o.AdminAddr); err != nil {
		errs = append(errs, fmt.Errorf("--admin-address: %w", err))
	}
	switch {
	case o.NodeName == "":
		errs = append(errs, errors.New("--node-name is required: set it, or NODE_NAME from the downward API (fieldRef spec.nodeName)"))
	case len(validation.IsDNS1123Subdomain(o.NodeName)) > 0:
		errs = append(errs, fmt.Errorf("--node-name %q is not a node name: %s",
			o.NodeName, strings.Join(validation.IsDNS1123Subdomain(o.NodeName), "; ")))
	}
	if !path.IsAbs(o.KubeletDir) {
		errs = append(errs, fmt.Errorf("--kubelet-dir must be an absolute path, got %q", o.KubeletDir))
	}
	if err := validateUnixEndpoint(o.CSIEndpoint); err != nil {
		errs = append(errs, fmt.Errorf("--csi-endpoint: %w", err))
	}
	if err := validateNATSURL(o.NATSURL); err != nil {
		errs = append(errs, fmt.Errorf("--nats-url: %w", err))
	}
	if err := o.Logging.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateUnixEndpoint accepts unix:///absolute/path, the only transport the kubelet uses for
// CSI plugins.
func validateUnixEndpoint(endpoint string) error {
	p, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok || !path.IsAbs(p) || path.Clean(p) == "/" {
		return fmt.Errorf("want unix:///absolute/path/to.sock, got %q", endpoint)
	}
	return nil
}

// validateNATSURL accepts an empty value (events disabled) or comma-separated URLs with a scheme
// the NATS client dials.
func validateNATSURL(urls string) error {
	if urls == "" {
		return nil
	}
	for raw := range strings.SplitSeq(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("parse NATS URL: %w", err)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("want nats://, tls://, ws:// or wss:// URLs, got %q", raw)
		}
		if u.Host == "" {
			return fmt.Errorf("NATS URL %q has no host", raw)
		}
	}
	return nil
}
