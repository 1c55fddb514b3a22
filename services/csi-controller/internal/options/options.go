// Package options holds the csi-controller's command-line options: defaults, flags and the
// checks that reject a bad combination before anything starts.
package options

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/spf13/pflag"

	"github.com/s3csi/s3csi/shared/admin"
	"github.com/s3csi/s3csi/shared/logging"
)

// Options configures one csi-controller process.
type Options struct {
	// AdminAddr is the host:port of /healthz, /readyz and /metrics. Each service has its own
	// default port so that all four can run side by side on one development host.
	AdminAddr string
	// CSIEndpoint is the unix socket the CSI sidecars (external-provisioner) dial.
	CSIEndpoint string
	// NATSURL lists the NATS servers, comma separated. Empty disables events: events are only
	// hints, so the system stays correct without them. Defaults to $NATS_URL.
	NATSURL string
	// Kubeconfig is a kubeconfig path for running outside a cluster; empty means in-cluster.
	Kubeconfig string
	// Logging holds --log-format and --log-level.
	Logging logging.Options
}

// New returns the defaults, taking environment-provided values (NATS_URL) from the environment.
func New() *Options {
	return &Options{
		AdminAddr:   ":8081",
		CSIEndpoint: "unix:///csi/csi.sock",
		NATSURL:     os.Getenv("NATS_URL"),
		Logging:     logging.NewOptions(),
	}
}

// AddFlags registers the options on fs, with the current values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.AdminAddr, "admin-address", o.AdminAddr, "host:port serving /healthz, /readyz and /metrics")
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

// validateUnixEndpoint accepts unix:///absolute/path, the only transport the CSI sidecars use.
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
