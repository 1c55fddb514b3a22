package servicecmd

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/s3csi/s3csi/shared/servicecmd/optionstest"
)

// electedOptions is how the leader-elected services combine the options: the Lease check needs
// --kubeconfig.
type electedOptions struct {
	CommonOptions
	LeaderElectionOptions
}

func newElectedOptions() *electedOptions {
	return &electedOptions{CommonOptions: NewCommonOptions(":8080"), LeaderElectionOptions: NewLeaderElectionOptions()}
}

func (o *electedOptions) AddFlags(fs *pflag.FlagSet) {
	o.CommonOptions.AddFlags(fs)
	o.LeaderElectionOptions.AddFlags(fs)
}

func (o *electedOptions) Validate() error { return o.LeaderElectionOptions.Validate(o.Kubeconfig) }

func TestLeaderElectionOptionsAddFlags(t *testing.T) {
	optionstest.FlagTable(t, map[string]string{"NATS_URL": ""}, newElectedOptions, []optionstest.FlagCase[*electedOptions]{
		{
			Name: "by default leader election is on and the Lease is in the pod's namespace",
			Want: func(o *electedOptions) {
				o.LeaderElectionOptions = LeaderElectionOptions{LeaderElect: true}
			},
		},
		{
			Name: "every flag is bound to its field",
			Args: []string{"--leader-elect=false", "--leader-election-namespace=s3csi"},
			Want: func(o *electedOptions) { o.LeaderElect, o.LeaderElectionNamespace = false, "s3csi" },
		},
	})
}

func TestLeaderElectionOptionsValidate(t *testing.T) {
	optionstest.ValidateTable(t, map[string]string{"NATS_URL": ""}, newElectedOptions, []optionstest.ValidateCase[*electedOptions]{
		{Name: "in cluster the defaults are valid", Modify: func(*electedOptions) {}},
		{
			Name:   "out of cluster with a Lease namespace is valid",
			Modify: func(o *electedOptions) { o.Kubeconfig = "/k"; o.LeaderElectionNamespace = "s3csi" },
		},
		{
			Name:   "out of cluster without leader election is valid",
			Modify: func(o *electedOptions) { o.Kubeconfig = "/k"; o.LeaderElect = false },
		},
		{
			Name:    "out of cluster with leader election needs a Lease namespace",
			Modify:  func(o *electedOptions) { o.Kubeconfig = "/k" },
			WantErr: []string{"--leader-elect with --kubeconfig needs --leader-election-namespace"},
		},
		{
			Name:    "an invalid Lease namespace is rejected",
			Modify:  func(o *electedOptions) { o.LeaderElectionNamespace = "Not_A_Namespace" },
			WantErr: []string{`--leader-election-namespace "Not_A_Namespace" is not a namespace name`},
		},
	})
}
