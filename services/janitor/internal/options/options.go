// Package options holds the janitor's command-line options: defaults, flags and the checks
// that reject a bad combination before anything starts.
package options

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/servicecmd"
)

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
	// CommonOptions are --admin-address, --nats-url (env NATS_URL), --kubeconfig and the
	// logging flags, shared by every service.
	servicecmd.CommonOptions
	// LeaderElectionOptions are --leader-elect and --leader-election-namespace.
	servicecmd.LeaderElectionOptions
	// MountpointNamespace is the namespace of the Mountpoint Pods. Defaults to
	// $MOUNTPOINT_NAMESPACE, else mppod.DefaultNamespace.
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
	// KubeAPIOptions are --kube-api-qps and --kube-api-burst: they bound the janitor's request
	// rate to the API server, so a mass cleanup never crowds out the control plane's other clients.
	servicecmd.KubeAPIOptions
	// DryRun logs every removal the janitor would make and writes nothing.
	DryRun bool
}

// New returns the defaults, taking environment-provided values (NATS_URL,
// MOUNTPOINT_NAMESPACE) from the environment.
func New() *Options {
	mpNamespace := os.Getenv("MOUNTPOINT_NAMESPACE")
	if mpNamespace == "" {
		mpNamespace = mppod.DefaultNamespace
	}
	return &Options{
		CommonOptions:         servicecmd.NewCommonOptions(":8084"),
		LeaderElectionOptions: servicecmd.NewLeaderElectionOptions(),
		MountpointNamespace:   mpNamespace,
		SweepInterval:         DefaultSweepInterval,
		StaleAfter:            DefaultStaleAfter,
		UnmountGrace:          DefaultUnmountGrace,
		NodeGoneGrace:         DefaultNodeGoneGrace,
		KubeAPIOptions:        servicecmd.KubeAPIOptions{KubeAPIQPS: DefaultKubeAPIQPS, KubeAPIBurst: DefaultKubeAPIBurst},
	}
}

// AddFlags registers the options on fs, with the current values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.CommonOptions.AddFlags(fs)
	o.LeaderElectionOptions.AddFlags(fs)
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
	o.KubeAPIOptions.AddFlags(fs)
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "log what would be removed and write nothing")
}

// Validate reports every invalid option at once, naming the flag to fix.
func (o *Options) Validate() error {
	errs := []error{o.CommonOptions.Validate()}
	if msgs := validation.IsDNS1123Label(o.MountpointNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--mountpoint-namespace %q is not a namespace name: %s",
			o.MountpointNamespace, strings.Join(msgs, "; ")))
	}
	errs = append(errs, o.LeaderElectionOptions.Validate(o.Kubeconfig))
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
	errs = append(errs, o.KubeAPIOptions.Validate()...)
	return errors.Join(errs...)
}
