// Package options holds the pod-reconciler's command-line options: defaults, flags and the checks
// that reject a bad combination before anything starts.
package options

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/servicecmd"
	"github.com/s3csi/s3csi/shared/version"
)

// Defaults of the reconciler options.
const (
	DefaultMaxConcurrentReconciles = 4
	DefaultResyncPeriod            = 5 * time.Minute
	DefaultStallTimeout            = 5 * time.Minute
	DefaultEventQueueSize          = 10000
	DefaultMountpointImage         = "s3csi-mounter:dev"
	// DefaultMountpointTerminationGracePeriod bounds how long a deleted or evicted Mountpoint
	// Pod keeps serving the workloads that still use it (docs/pod-reconciler.md).
	DefaultMountpointTerminationGracePeriod = 10 * time.Minute
)

// Options configures one pod-reconciler process.
type Options struct {
	// CommonOptions are --admin-address, --nats-url (env NATS_URL), --kubeconfig and the
	// logging flags, shared by every service.
	servicecmd.CommonOptions
	// LeaderElectionOptions are --leader-elect and --leader-election-namespace.
	servicecmd.LeaderElectionOptions
	// MountpointNamespace is the namespace of the Mountpoint Pods. Defaults to
	// $MOUNTPOINT_NAMESPACE, else mppod.DefaultNamespace.
	MountpointNamespace string
	// DriverVersion labels the Mountpoint Pods and S3PAs this version creates; Mountpoint Pods
	// of another version get no new workload, so they drain during an upgrade. Defaults to
	// $DRIVER_VERSION, else version.Version (set at link time).
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
	// MountpointTerminationGracePeriod is the Mountpoint Pods' terminationGracePeriodSeconds:
	// a Mountpoint Pod deleted or evicted while workloads use it serves on until the last one
	// is gone, and at most this long. Whole seconds, at least one.
	MountpointTerminationGracePeriod time.Duration
	// MountpointImagePullSecrets names, comma-separated, Secrets in the Mountpoint namespace
	// that the Mountpoint Pods pull their image with (MountpointPullSecrets splits them).
	MountpointImagePullSecrets string
	// MountpointServiceAccountName, when set, is the Mountpoint Pods' service account (a
	// volume's mountpointPodServiceAccountName attribute overrides it).
	MountpointServiceAccountName string
	// Mountpoint{CPU,Memory}{Request,Limit} are the mounter container's resources as
	// Kubernetes quantities; empty sets none. Volume attributes override each one.
	MountpointCPURequest, MountpointMemoryRequest, MountpointCPULimit, MountpointMemoryLimit string
}

// New returns the defaults, taking environment-provided values (NATS_URL,
// MOUNTPOINT_NAMESPACE) from the environment.
func New() *Options {
	mpNamespace := os.Getenv("MOUNTPOINT_NAMESPACE")
	if mpNamespace == "" {
		mpNamespace = mppod.DefaultNamespace
	}
	return &Options{
		CommonOptions:             servicecmd.NewCommonOptions(":8082"),
		LeaderElectionOptions:     servicecmd.NewLeaderElectionOptions(),
		MountpointNamespace:       mpNamespace,
		DriverVersion:             envOr("DRIVER_VERSION", version.Version),
		MaxConcurrentReconciles:   DefaultMaxConcurrentReconciles,
		ResyncPeriod:              DefaultResyncPeriod,
		StallTimeout:              DefaultStallTimeout,
		EventQueueSize:            DefaultEventQueueSize,
		MountpointImage:           envOr("MOUNTPOINT_IMAGE", DefaultMountpointImage),
		MountpointImagePullPolicy: string(corev1.PullIfNotPresent),

		MountpointTerminationGracePeriod: DefaultMountpointTerminationGracePeriod,
	}
}

// AddFlags registers the options on fs, with the current values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.CommonOptions.AddFlags(fs)
	o.LeaderElectionOptions.AddFlags(fs)
	fs.StringVar(&o.MountpointNamespace, "mountpoint-namespace", o.MountpointNamespace,
		"namespace of the Mountpoint Pods (env MOUNTPOINT_NAMESPACE)")
	o.addReconcilerFlags(fs)
}

// Validate reports every invalid option at once, naming the flag to fix.
func (o *Options) Validate() error {
	errs := []error{o.CommonOptions.Validate()}
	if msgs := validation.IsDNS1123Label(o.MountpointNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--mountpoint-namespace %q is not a namespace name: %s",
			o.MountpointNamespace, strings.Join(msgs, "; ")))
	}
	errs = append(errs, o.LeaderElectionOptions.Validate(o.Kubeconfig))
	errs = append(errs, o.validateReconciler()...)
	return errors.Join(errs...)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
