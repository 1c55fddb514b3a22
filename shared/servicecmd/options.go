// Package servicecmd holds what the command of every long-running s3csi service shares: the
// common options (admin address, NATS URL, kubeconfig, logging) and Main, the life of the
// binary from flag parsing to exit code.
package servicecmd

import (
	"errors"
	"fmt"
	"os"
	"strconv"

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
	// NATSStreamReplicas is how many copies of the S3CSI_EVENTS stream a clustered NATS keeps,
	// 1 to 5, used when the service creates the missing stream (an existing stream is left as
	// it is). More than 1 needs a NATS cluster of at least as many servers. Defaults to
	// $NATS_STREAM_REPLICAS, else 1.
	NATSStreamReplicas int
	// Kubeconfig is a kubeconfig path for running outside a cluster; empty means in-cluster.
	Kubeconfig string
	// Logging holds --log-format and --log-level.
	Logging logging.Options
}

// NewCommonOptions returns the defaults for a service whose admin endpoint listens on
// adminAddr, taking NATS_URL and the NATS authentication (NATSAuthFromEnv) from the environment.
func NewCommonOptions(adminAddr string) CommonOptions {
	return CommonOptions{
		AdminAddr:          adminAddr,
		NATSURL:            os.Getenv("NATS_URL"),
		NATSAuth:           NATSAuthFromEnv(),
		NATSStreamReplicas: streamReplicasFromEnv(),
		Logging:            logging.NewOptions(),
	}
}

// streamReplicasFromEnv reads $NATS_STREAM_REPLICAS: unset or empty is the default, and a
// value that is not a number becomes 0, which Validate rejects naming the variable.
func streamReplicasFromEnv() int {
	v := os.Getenv("NATS_STREAM_REPLICAS")
	if v == "" {
		return events.DefaultReplicas
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	return n
}

// StreamConfig is the configuration the service creates the S3CSI_EVENTS stream with when it
// is missing.
func (o *CommonOptions) StreamConfig() events.StreamConfig {
	return events.StreamConfig{Replicas: o.NATSStreamReplicas}
}

// AddFlags registers --admin-address, --nats-url, --nats-stream-replicas, the NATS authentication flags, --kubeconfig, --log-format and --log-level on
// fs, with the current values as defaults.
func (o *CommonOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.AdminAddr, "admin-address", o.AdminAddr, "host:port serving /healthz, /readyz and /metrics")
	fs.StringVar(&o.NATSURL, "nats-url", o.NATSURL, "NATS server URLs, comma separated; empty disables events (env NATS_URL)")
	AddNATSAuthFlags(fs, &o.NATSAuth)
	fs.IntVar(&o.NATSStreamReplicas, "nats-stream-replicas", o.NATSStreamReplicas,
		"copies of the S3CSI_EVENTS stream, 1 to 5, when creating it; more than 1 needs a NATS cluster (env NATS_STREAM_REPLICAS)")
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
	if o.NATSStreamReplicas < 1 || o.NATSStreamReplicas > events.MaxReplicas {
		errs = append(errs, fmt.Errorf("--nats-stream-replicas (env NATS_STREAM_REPLICAS): %d is not in 1..%d",
			o.NATSStreamReplicas, events.MaxReplicas))
	}
	if err := o.Logging.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// LoggingOptions returns the logging options, from which Main builds the service's logger.
func (o *CommonOptions) LoggingOptions() logging.Options {
	return o.Logging
}
