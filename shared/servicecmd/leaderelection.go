package servicecmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// LeaderElectionOptions are the options of a service that runs one active replica at a time (the
// pod-reconciler and the janitor; never the node-agent). A service embeds them beside
// CommonOptions and calls AddFlags and Validate from its own.
type LeaderElectionOptions struct {
	// LeaderElect makes one replica at a time do the work. Turn it off only for a single
	// replica in development: two active replicas would race, creating or deleting the same
	// objects twice.
	LeaderElect bool
	// LeaderElectionNamespace holds the leader-election Lease. Empty means the pod's own
	// namespace, which is only known in-cluster.
	LeaderElectionNamespace string
}

// NewLeaderElectionOptions returns the defaults: leader election on, the Lease in the pod's
// namespace.
func NewLeaderElectionOptions() LeaderElectionOptions {
	return LeaderElectionOptions{LeaderElect: true}
}

// AddFlags registers --leader-elect and --leader-election-namespace on fs, with the current
// values as defaults.
func (o *LeaderElectionOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect one active replica; disable only when running a single replica")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace,
		"namespace of the leader-election Lease; empty uses the pod's namespace")
}

// Validate reports every invalid leader-election option at once, naming the flag to fix.
// kubeconfig is the service's --kubeconfig: out of cluster the Lease namespace must be given.
func (o *LeaderElectionOptions) Validate(kubeconfig string) error {
	var errs []error
	if o.LeaderElectionNamespace != "" {
		if msgs := validation.IsDNS1123Label(o.LeaderElectionNamespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--leader-election-namespace %q is not a namespace name: %s",
				o.LeaderElectionNamespace, strings.Join(msgs, "; ")))
		}
	}
	// Out of cluster there is no service-account namespace to hold the Lease, and controller-runtime
	// would only fail once the API server is reached; say so now.
	if o.LeaderElect && kubeconfig != "" && o.LeaderElectionNamespace == "" {
		errs = append(errs, errors.New("--leader-elect with --kubeconfig needs --leader-election-namespace"))
	}
	return errors.Join(errs...)
}
