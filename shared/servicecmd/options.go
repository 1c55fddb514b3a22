// Package servicecmd holds what the command of every long-running s3csi service shares: the
// common options (admin address, NATS URL, kubeconfig, logging) and Main, the life of the
// binary from flag parsing to exit code.
package servicecmd

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/s3csi/s3csi/shared/admin"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/logging"
)

// CommonOptions are the options every service has. A service embeds them in its own Options,
// calls AddFlags and Validate from its own, and reads the fields as its own (opts.NATSURL).
type CommonOptions struct {
	// AdminAddr is the host:port of /healthz, /readyz and /metrics. Each service has its own
	// default port so that all four can run side by side on one development host.
	AdminAddr string
	// NATSURL lists the NATS servers, comma separated. Empty disables events: events are only
	// hints, so the system stays correct without them. Defaults to $NATS_URL.
	NATSURL string
	// NATSAuth is the service's NATS user, its password file and the TLS files; see
	// AddNATSAuthFlags. Secrets are files (a mounted Secret), never flag values.
	NATSAuth events.Auth
	// Kubeconfig is a kubeconfig path for running outside a cluster; empty means in-cluster.
	Kubeconfig string
	// Logging holds --log-format and --log-level.
	Logging logging.Options
}

// NewCommonOptions returns the defaults for a service whose admin endpoint listens on
// adminAddr, taking NATS_URL and the NATS authentication (natsAuthFromEnv) from the environment.
func NewCommonOptions(adminAddr string) CommonOptions {
	return CommonOptions{
		AdminAddr: adminAddr,
		NATSURL:   os.Getenv("NATS_URL"),
		NATSAuth:  natsAuthFromEnv(),
		Logging:   logging.NewOptions(),
	}
}

// AddFlags registers --admin-address, --nats-url, the NATS authentication flags, --kubeconfig, --log-format and --log-level on
// fs, with the current values as defaults.
func (o *CommonOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.AdminAddr, "admin-address", o.AdminAddr, "host:port serving /healthz, /readyz and /metrics")
	fs.StringVar(&o.NATSURL, "nats-url", o.NATSURL, "NATS server URLs, comma separated; empty disables events (env NATS_URL)")
	o.addNATSAuthFlags(fs)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "path to a kubeconfig; empty uses the in-cluster configuration")
	o.Logging.AddFlags(fs)
}

// Validate reports every invalid common option at once, each error naming the flag to fix. A
// service joins it with its own errors; errors.Join drops it when it is nil.
func (o *CommonOptions) Validate() error {
	var errs []error
	if err := admin.ValidateAddr(o.AdminAddr); err != nil {
		errs = append(errs, fmt.Errorf("--admin-address: %w", err))
	}
	if err := events.ValidateURLs(o.NATSURL); err != nil {
		errs = append(errs, fmt.Errorf("--nats-url: %w", err))
	}
	errs = append(errs, o.validateNATSAuth()...)
	if err := o.Logging.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// LoggingOptions returns the logging options, from which Main builds the service's logger.
func (o *CommonOptions) LoggingOptions() logging.Options {
	return o.Logging
}
