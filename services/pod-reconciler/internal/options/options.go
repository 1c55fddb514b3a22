// Package options holds the pod-reconciler's command-line options: defaults, flags and the checks
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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/s3csi/s3csi/shared/admin"
	"github.com/s3csi/s3csi/shared/logging"
)

// Defaults of the reconciler options.
const (
	DefaultMaxConcurrentReconciles = 4
	DefaultResyncPeriod            = 5 * time.Minute
	DefaultStallTimeout            = 5 * time.Minute
	DefaultEventQueueSize          = 10000
	DefaultMountpointImage         = "s3csi-mounter:dev"
	DefaultDriverVersion           = "dev"
)

// DefaultMountpointNamespace is where Mountpoint Pods live unless MOUNTPOINT_NAMESPACE says
// otherwise; the name is kept from the Scality CSI Driver for S3 v2.
const DefaultMountpointNamespace = "mount-s3"

// Options configures one pod-reconciler process.
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
	// replica in development: two active replicas would create two Mountpoint Pods or two S3PAs for the same volume.
	LeaderElect bool
	// LeaderElectionNamespace holds the leader-election Lease. Empty means the pod's own
	// namespace, which is only known in-cluster.
	LeaderElectionNamespace string
	// MountpointNamespace is the namespace of the Mountpoint Pods. Defaults to
	// $MOUNTPOINT_NAMESPACE, else DefaultMountpointNamespace.
	MountpointNamespace string
	// DriverVersion labels the Mountpoint Pods and S3PAs this version creates; Mountpoint Pods
	// of another version get no new workload, so they drain during an upgrade. Defaults to
	// $DRIVER_VERSION, else DefaultDriverVersion.
	DriverVersion string
	// MaxConcurrentReconciles is the number of concurrent reconciles of each controller.
	MaxConcurrentReconciles int
	// ResyncPeriod is the interval of the full resync that re-enqueues every workload,
	// Mountpoint Pod and S3PA whether or not a watch event arrived.
	ResyncPeriod time.Duration
	// StallTimeout is how long work may stay pending without a reconcile finishing before the
	// liveness check fails and the kubelet restarts the container.
	StallTimeout time.Duration
	// EventQueueSize bounds the events waiting to be published; beyond it events are dropped
	// and counted (consumers fall back to re-reading the API server).
	EventQueueSize int
	// MountpointImage runs s3csi-mounter in the Mountpoint Pods. Defaults to
	// $MOUNTPOINT_IMAGE, else DefaultMountpointImage.
	MountpointImage string
	// MountpointImagePullPolicy is Always, IfNotPresent or Never.
	MountpointImagePullPolicy string
	// MountpointPriorityClassName, when set, is the Mountpoint Pods' priority class; it must
	// exist, or the API server refuses the pods.
	MountpointPriorityClassName string
	// MountpointServiceAccountName, when set, is the Mountpoint Pods' service account (a
	// volume's mountpointPodServiceAccountName attribute overrides it).
	MountpointServiceAccountName string
	// Mountpoint{CPU,Memory}{Request,Limit} are the mounter container's resources as
	// Kubernetes quantities; empty sets none. Volume attributes override each one.
	MountpointCPURequest, MountpointMemoryRequest, MountpointCPULimit, MountpointMemoryLimit string
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
		AdminAddr:                 ":8082",
		NATSURL:                   os.Getenv("NATS_URL"),
		LeaderElect:               true,
		MountpointNamespace:       mpNamespace,
		DriverVersion:             envOr("DRIVER_VERSION", DefaultDriverVersion),
		MaxConcurrentReconciles:   DefaultMaxConcurrentReconciles,
		ResyncPeriod:              DefaultResyncPeriod,
		StallTimeout:              DefaultStallTimeout,
		EventQueueSize:            DefaultEventQueueSize,
		MountpointImage:           envOr("MOUNTPOINT_IMAGE", DefaultMountpointImage),
		MountpointImagePullPolicy: string(corev1.PullIfNotPresent),
		Logging:                   logging.NewOptions(),
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
	o.addReconcilerFlags(fs)
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
	errs = append(errs, o.validateReconciler()...)
	if err := o.Logging.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
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
