// Package options holds the janitor's command-line options: defaults, flags and the checks
// that reject a bad combination before anything starts.
package options

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/s3csi/s3csi/shared/admin"
	"github.com/s3csi/s3csi/shared/logging"
)

// DefaultMountpointNamespace is where Mountpoint Pods live unless MOUNTPOINT_NAMESPACE says
// otherwise; the name is kept from the Scality CSI Driver for S3 v2.
const DefaultMountpointNamespace = "mount-s3"

// Defaults of the cleanup timing options.
const (
	// DefaultSweepInterval is how often every attachment and Mountpoint Pod is checked, events or
	// not: the bound on how long a leak survives with NATS down.
	DefaultSweepInterval = 2 * time.Minute
	// DefaultStaleAfter is how old an attachment entry or a Mountpoint Pod must be before the
	// janitor may remove it; far longer than any cache lag of the pod-reconciler.
	DefaultStaleAfter = 2 * time.Minute
	// DefaultUnmountGrace is how long a Mountpoint Pod asked to unmount may take to finish before
	// it is deleted anyway.
	DefaultUnmountGrace = 10 * time.Minute
	// DefaultNodeGoneGrace is how long a Node must stay absent before its attachments and
	// Mountpoint Pods are removed; a kubelet re-registers a deleted Node well within it.
	DefaultNodeGoneGrace = time.Minute
)

// Defaults of the API client's rate limit: those of kube-controller-manager.
const (
	DefaultKubeAPIQPS   = 20
	DefaultKubeAPIBurst = 30
)

// minInterval is the smallest accepted duration: anything shorter would hammer the API server.
const minInterval = time.Second

// Options configures one janitor process.
type Options struct {
	// AdminAddr is the host:port of /healthz, /readyz and /metrics. Each service has its own
	// default port so that all four can run side by side on one development host.
	AdminAddr string
	// NATSURL lists the NATS servers, comma separated. Empty disables events: events are only
	// hints, so the system stays correct without them. Defaults to $NATS_URL.
	NATSURL string
	// Kubeconfig is a kubeconfig path for running outside a cluster; empty means in-cluster.
	Kubeconfig string
	// LeaderElect makes one replica at a time do the work. Turn it off only for a single
	// replica in development: two active replicas would delete what the other is about to reuse.
	LeaderElect bool
	// LeaderElectionNamespace holds the leader-election Lease. Empty means the pod's own
	// namespace, which is only known in-cluster.
	LeaderElectionNamespace string
	// MountpointNamespace is the namespace of the Mountpoint Pods. Defaults to
	// $MOUNTPOINT_NAMESPACE, else DefaultMountpointNamespace.
	MountpointNamespace string
	// SweepInterval is the period of the full sweep that converges without events.
	SweepInterval time.Duration
	// StaleAfter is the minimum age of a workload entry (attachmentTime), an empty attachment or
	// an unreferenced Mountpoint Pod (creationTimestamp) before the janitor removes it.
	StaleAfter time.Duration
	// UnmountGrace is how long an unreferenced Mountpoint Pod asked to unmount may keep running
	// before it is deleted.
	UnmountGrace time.Duration
	// NodeGoneGrace is how long a Node must be absent before its attachments are removed.
	NodeGoneGrace time.Duration
	// KubeAPIQPS and KubeAPIBurst bound the janitor's request rate to the API server, so a
	// mass cleanup never crowds out the control plane's other clients.
	KubeAPIQPS   float32
	KubeAPIBurst int
	// DryRun logs every removal the janitor would make and writes nothing.
	DryRun bool
	// Logging holds --log-format and --log-level.
	Logging logging.Options
}

// New returns the defaults, taking environment-provided values (NATS_URL,
// MOUNTPOINT_NAMESPACE) from the environment.
func New() *Options {
	mpNamespace := os.Getenv("MOUNTPOINT_NAMESPACE")
	if mpNamespace == "" {
		mpNamespace = DefaultMountpointNamespace
	}
	return &Options{
		AdminAddr:           ":8084",
		NATSURL:             os.Getenv("NATS_URL"),
		LeaderElect:         true,
		MountpointNamespace: mpNamespace,
		SweepInterval:       DefaultSweepInterval,
		StaleAfter:          DefaultStaleAfter,
		UnmountGrace:        DefaultUnmountGrace,
		NodeGoneGrace:       DefaultNodeGoneGrace,
		KubeAPIQPS:          DefaultKubeAPIQPS,
		KubeAPIBurst:        DefaultKubeAPIBurst,
		Logging:             logging.NewOptions(),
	}
}

// AddFlags registers the options on fs, with the current values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.AdminAddr, "admin-address", o.AdminAddr, "host:port serving /healthz, /readyz and /metrics")
	fs.StringVar(&o.NATSURL, "nats-url", o.NATSURL, "NATS server URLs, comma separated; empty disables events (env NATS_URL)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "path to a kubeconfig; empty uses the in-cluster configuration")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect one active replica; disable only when running a single replica")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace,
		"namespace of the leader-election Lease; empty uses the pod's namespace")
	fs.StringVar(&o.MountpointNamespace, "mountpoint-namespace", o.MountpointNamespace,
		"namespace of the Mountpoint Pods (env MOUNTPOINT_NAMESPACE)")
	fs.DurationVar(&o.SweepInterval, "sweep-interval", o.SweepInterval,
		"period of the full sweep of attachments and Mountpoint Pods")
	fs.DurationVar(&o.StaleAfter, "stale-after", o.StaleAfter,
		"minimum age of a workload entry, empty attachment or unreferenced Mountpoint Pod before it is removed")
	fs.DurationVar(&o.UnmountGrace, "unmount-grace", o.UnmountGrace,
		"how long an unreferenced Mountpoint Pod asked to unmount may run before it is deleted")
	fs.DurationVar(&o.NodeGoneGrace, "node-gone-grace", o.NodeGoneGrace,
		"how long a Node must be absent before its attachments and Mountpoint Pods are removed")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "sustained requests per second to the API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "requests to the API server allowed in a burst above --kube-api-qps")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "log what would be removed and write nothing")
	o.Logging.AddFlags(fs)
}

// Validate reports every invalid option at once, naming the flag to fix.
func (o *Options) Validate() error {
	var errs []error
	if err := admin.ValidateAddr(o.AdminAddr); err != nil {
		errs = append(errs, fmt.Errorf("--admin-address: %w", err))
	}
	if err := validateNATSURL(o.NATSURL); err != nil {
		errs = append(errs, fmt.Errorf("--nats-url: %w", err))
	}
	if msgs := validation.IsDNS1123Label(o.MountpointNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--mountpoint-namespace %q is not a namespace name: %s",
			o.MountpointNamespace, strings.Join(msgs, "; ")))
	}
	if o.LeaderElectionNamespace != "" {
		if msgs := validation.IsDNS1123Label(o.LeaderElectionNamespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--leader-election-namespace %q is not a namespace name: %s",
				o.LeaderElectionNamespace, strings.Join(msgs, "; ")))
		}
	}
	// Out of cluster there is no service-account namespace to hold the Lease, and controller-runtime
	// would only fail once the API server is reached; say so now.
	if o.LeaderElect && o.Kubeconfig != "" && o.LeaderElectionNamespace == "" {
		errs = append(errs, errors.New("--leader-elect with --kubeconfig needs --leader-election-namespace"))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--sweep-interval", o.SweepInterval}, {"--stale-after", o.StaleAfter},
		{"--unmount-grace", o.UnmountGrace}, {"--node-gone-grace", o.NodeGoneGrace},
	} {
		if d.value < minInterval {
			errs = append(errs, fmt.Errorf("%s %s is shorter than %s", d.flag, d.value, minInterval))
		}
	}
	if o.KubeAPIQPS <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v must be positive", o.KubeAPIQPS))
	}
	if o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst %d must be at least 1", o.KubeAPIBurst))
	}
	if err := o.Logging.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
