package options

import (
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/servicecmd"
	"github.com/s3csi/s3csi/shared/servicecmd/optionstest"
)

// clearedEnv clears every variable New reads, so the host's environment cannot leak in.
var clearedEnv = map[string]string{"NATS_URL": "", "MOUNTPOINT_NAMESPACE": ""}

func TestValidate(t *testing.T) {
	optionstest.ValidateTable(t, clearedEnv, New, []optionstest.ValidateCase[*Options]{
		{Name: "the defaults are valid", Modify: func(*Options) {}},
		{Name: "an empty Mountpoint namespace is rejected", Modify: func(o *Options) { o.MountpointNamespace = "" }, WantErr: []string{"--mountpoint-namespace"}},
		{Name: "an invalid Mountpoint namespace is rejected", Modify: func(o *Options) { o.MountpointNamespace = "Mount_S3" }, WantErr: []string{"--mountpoint-namespace"}},
		{Name: "a sub-second sweep interval is rejected", Modify: func(o *Options) { o.SweepInterval = time.Millisecond }, WantErr: []string{"--sweep-interval"}},
		{Name: "a zero staleness threshold is rejected", Modify: func(o *Options) { o.StaleAfter = 0 }, WantErr: []string{"--stale-after"}},
		{Name: "a negative unmount grace is rejected", Modify: func(o *Options) { o.UnmountGrace = -time.Minute }, WantErr: []string{"--unmount-grace"}},
		{Name: "a zero node-gone grace is rejected", Modify: func(o *Options) { o.NodeGoneGrace = 0 }, WantErr: []string{"--node-gone-grace"}},
		{Name: "a zero API request rate is rejected", Modify: func(o *Options) { o.KubeAPIQPS = 0 }, WantErr: []string{"--kube-api-qps"}},
		{Name: "a zero API burst is rejected", Modify: func(o *Options) { o.KubeAPIBurst = 0 }, WantErr: []string{"--kube-api-burst"}},
		{
			Name: "every invalid option is reported at once, common ones included",
			Modify: func(o *Options) {
				o.AdminAddr, o.NATSURL, o.LeaderElectionNamespace, o.MountpointNamespace = "", "localhost:4222", "Bad_NS", ""
			},
			WantErr: []string{"--admin-address", "--nats-url", "--leader-election-namespace", "--mountpoint-namespace"},
		},
	})
}

func TestAddFlags(t *testing.T) {
	optionstest.FlagTable(t, clearedEnv, New, []optionstest.FlagCase[*Options]{
		{
			Name: "without flags or environment the defaults apply",
			Want: func(o *Options) {
				*o = Options{
					CommonOptions:         servicecmd.CommonOptions{AdminAddr: ":8084", NATSStreamReplicas: 1, Logging: o.Logging},
					LeaderElectionOptions: servicecmd.LeaderElectionOptions{LeaderElect: true},
					MountpointNamespace:   "mount-s3",
					SweepInterval:         2 * time.Minute,
					StaleAfter:            2 * time.Minute,
					UnmountGrace:          10 * time.Minute,
					NodeGoneGrace:         time.Minute,
					KubeAPIOptions:        servicecmd.KubeAPIOptions{KubeAPIQPS: 20, KubeAPIBurst: 30},
				}
			},
		},
		{
			Name: "the environment provides the Mountpoint namespace",
			Env:  map[string]string{"MOUNTPOINT_NAMESPACE": "mp-env"},
			Want: func(o *Options) { o.MountpointNamespace = "mp-env" },
		},
		{
			Name: "flags override the environment",
			Env:  map[string]string{"MOUNTPOINT_NAMESPACE": "mp-env"},
			Args: []string{"--mountpoint-namespace=mp-flag"},
			Want: func(o *Options) { o.MountpointNamespace = "mp-flag" },
		},
		{
			Name: "every flag is bound to its field",
			Args: []string{
				"--admin-address=127.0.0.1:9000", "--nats-url=nats://n:4222", "--kubeconfig=/k", "--leader-elect=false",
				"--leader-election-namespace=s3csi", "--log-format=text", "-v=4",
				"--sweep-interval=30s", "--stale-after=1m", "--unmount-grace=5m", "--node-gone-grace=20s", "--dry-run",
				"--kube-api-qps=50", "--kube-api-burst=100",
			},
			Want: func(o *Options) {
				o.AdminAddr = "127.0.0.1:9000"
				o.NATSURL = "nats://n:4222"
				o.Kubeconfig = "/k"
				o.LeaderElect = false
				o.LeaderElectionNamespace = "s3csi"
				o.Logging.Format = "text"
				o.Logging.Verbosity = 4
				o.SweepInterval = 30 * time.Second
				o.StaleAfter = time.Minute
				o.UnmountGrace = 5 * time.Minute
				o.NodeGoneGrace = 20 * time.Second
				o.DryRun = true
				o.KubeAPIQPS = 50
				o.KubeAPIBurst = 100
			},
		},
	})
}
