package options

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		modify  func(*Options)
		wantErr []string
	}{
		{name: "the defaults are valid", modify: func(*Options) {}},
		{name: "several NATS servers are valid", modify: func(o *Options) { o.NATSURL = "nats://a:4222,tls://b:4222" }},
		{
			name:   "out of cluster with a Lease namespace is valid",
			modify: func(o *Options) { o.Kubeconfig = "/k"; o.LeaderElectionNamespace = "s3csi" },
		},
		{
			name:   "out of cluster without leader election is valid",
			modify: func(o *Options) { o.Kubeconfig = "/k"; o.LeaderElect = false },
		},
		{
			name:    "out of cluster with leader election needs a Lease namespace",
			modify:  func(o *Options) { o.Kubeconfig = "/k" },
			wantErr: []string{"--leader-election-namespace"},
		},
		{
			name:    "an invalid Lease namespace is rejected",
			modify:  func(o *Options) { o.LeaderElectionNamespace = "Not_A_Namespace" },
			wantErr: []string{"--leader-election-namespace"},
		},
		{name: "an empty Mountpoint namespace is rejected", modify: func(o *Options) { o.MountpointNamespace = "" }, wantErr: []string{"--mountpoint-namespace"}},
		{name: "an invalid Mountpoint namespace is rejected", modify: func(o *Options) { o.MountpointNamespace = "Mount_S3" }, wantErr: []string{"--mountpoint-namespace"}},
		{name: "an admin address without a port is rejected", modify: func(o *Options) { o.AdminAddr = "localhost" }, wantErr: []string{"--admin-address"}},
		{name: "a NATS URL without a scheme is rejected", modify: func(o *Options) { o.NATSURL = "localhost:4222" }, wantErr: []string{"--nats-url"}},
		{name: "a sub-second sweep interval is rejected", modify: func(o *Options) { o.SweepInterval = time.Millisecond }, wantErr: []string{"--sweep-interval"}},
		{name: "a zero staleness threshold is rejected", modify: func(o *Options) { o.StaleAfter = 0 }, wantErr: []string{"--stale-after"}},
		{name: "a negative unmount grace is rejected", modify: func(o *Options) { o.UnmountGrace = -time.Minute }, wantErr: []string{"--unmount-grace"}},
		{name: "a zero node-gone grace is rejected", modify: func(o *Options) { o.NodeGoneGrace = 0 }, wantErr: []string{"--node-gone-grace"}},
		{name: "a zero API request rate is rejected", modify: func(o *Options) { o.KubeAPIQPS = 0 }, wantErr: []string{"--kube-api-qps"}},
		{name: "a zero API burst is rejected", modify: func(o *Options) { o.KubeAPIBurst = 0 }, wantErr: []string{"--kube-api-burst"}},
		{name: "an unknown log format is rejected", modify: func(o *Options) { o.Logging.Format = "xml" }, wantErr: []string{"--log-format"}},
		{
			name:    "every invalid option is reported at once",
			modify:  func(o *Options) { o.AdminAddr = ""; o.MountpointNamespace = "" },
			wantErr: []string{"--admin-address", "--mountpoint-namespace"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NATS_URL", "")
			t.Setenv("MOUNTPOINT_NAMESPACE", "")
			o := New()
			tt.modify(o)
			err := o.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %q", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %v, want it to name %q", err, want)
				}
			}
		})
	}
}

func TestAddFlags(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want func(*Options)
	}{
		{
			name: "without flags or environment the defaults apply",
			want: func(o *Options) {
				*o = Options{
					AdminAddr: ":8084", LeaderElect: true, MountpointNamespace: "mount-s3",
					SweepInterval: 2 * time.Minute, StaleAfter: 2 * time.Minute,
					UnmountGrace: 10 * time.Minute, NodeGoneGrace: time.Minute,
					KubeAPIQPS: 20, KubeAPIBurst: 30, Logging: o.Logging,
				}
			},
		},
		{
			name: "the environment provides the NATS URL and the Mountpoint namespace",
			env:  map[string]string{"NATS_URL": "nats://env:4222", "MOUNTPOINT_NAMESPACE": "mp-env"},
			want: func(o *Options) { o.NATSURL = "nats://env:4222"; o.MountpointNamespace = "mp-env" },
		},
		{
			name: "flags override the environment",
			env:  map[string]string{"NATS_URL": "nats://env:4222", "MOUNTPOINT_NAMESPACE": "mp-env"},
			args: []string{"--nats-url=nats://flag:4222", "--mountpoint-namespace=mp-flag"},
			want: func(o *Options) { o.NATSURL = "nats://flag:4222"; o.MountpointNamespace = "mp-flag" },
		},
		{
			name: "every flag is bound to its field",
			args: []string{
				"--admin-address=127.0.0.1:9000", "--kubeconfig=/k", "--leader-elect=false",
				"--leader-election-namespace=s3csi", "--log-format=text", "-v=4",
				"--sweep-interval=30s", "--stale-after=1m", "--unmount-grace=5m", "--node-gone-grace=20s", "--dry-run",
				"--kube-api-qps=50", "--kube-api-burst=100",
			},
			want: func(o *Options) {
				o.AdminAddr = "127.0.0.1:9000"
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NATS_URL", "")
			t.Setenv("MOUNTPOINT_NAMESPACE", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			want := New()
			tt.want(want)

			got := New()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			got.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatalf("parse flags: %v", err)
			}
			if *got != *want {
				t.Errorf("options = %+v, want %+v", *got, *want)
			}
		})
	}
}
