package options

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// clearEnv unsets every variable New reads, so the host's environment cannot leak in.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"NATS_URL", "MOUNTPOINT_NAMESPACE", "DRIVER_VERSION", "MOUNTPOINT_IMAGE"} {
		t.Setenv(k, "")
	}
}

func TestMountpointResources(t *testing.T) {
	o := New()
	o.MountpointCPURequest, o.MountpointMemoryLimit = "250m", "1Gi"
	r, err := o.MountpointResources()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Requests.Cpu().String(); got != "250m" {
		t.Errorf("CPU request = %s, want 250m", got)
	}
	if got := r.Limits.Memory().String(); got != "1Gi" {
		t.Errorf("memory limit = %s, want 1Gi", got)
	}
	if _, ok := r.Requests["memory"]; ok {
		t.Errorf("an unset memory request is set: %v", r.Requests)
	}
}

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
		{name: "an unknown log format is rejected", modify: func(o *Options) { o.Logging.Format = "xml" }, wantErr: []string{"--log-format"}},
		{
			name: "resources and a priority class are valid",
			modify: func(o *Options) {
				o.MountpointCPURequest, o.MountpointMemoryLimit, o.MountpointPriorityClassName = "100m", "256Mi", "mount-s3-critical"
			},
		},
		{name: "zero concurrent reconciles are rejected", modify: func(o *Options) { o.MaxConcurrentReconciles = 0 }, wantErr: []string{"--max-concurrent-reconciles"}},
		{name: "a resync period of a second is rejected", modify: func(o *Options) { o.ResyncPeriod = time.Second }, wantErr: []string{"--resync-period"}},
		{name: "a stall timeout of a second is rejected", modify: func(o *Options) { o.StallTimeout = time.Second }, wantErr: []string{"--stall-timeout"}},
		{name: "an empty event queue is rejected", modify: func(o *Options) { o.EventQueueSize = 0 }, wantErr: []string{"--event-queue-size"}},
		{name: "an empty Mountpoint image is rejected", modify: func(o *Options) { o.MountpointImage = " " }, wantErr: []string{"--mountpoint-image"}},
		{name: "an unknown pull policy is rejected", modify: func(o *Options) { o.MountpointImagePullPolicy = "Sometimes" }, wantErr: []string{"--mountpoint-image-pull-policy"}},
		{name: "a driver version that is no label value is rejected", modify: func(o *Options) { o.DriverVersion = "v1/2" }, wantErr: []string{"--driver-version"}},
		{name: "an invalid priority class is rejected", modify: func(o *Options) { o.MountpointPriorityClassName = "Not Valid" }, wantErr: []string{"--mountpoint-priority-class-name"}},
		{name: "an invalid service account is rejected", modify: func(o *Options) { o.MountpointServiceAccountName = "_sa" }, wantErr: []string{"--mountpoint-service-account-name"}},
		{name: "a negative memory limit is rejected", modify: func(o *Options) { o.MountpointMemoryLimit = "-1Mi" }, wantErr: []string{"--mountpoint-memory-limit"}},
		{name: "a CPU request that is no quantity is rejected", modify: func(o *Options) { o.MountpointCPURequest = "lots" }, wantErr: []string{"--mountpoint-cpu-request"}},
		{
			name:    "every invalid option is reported at once",
			modify:  func(o *Options) { o.AdminAddr = ""; o.MountpointNamespace = "" },
			wantErr: []string{"--admin-address", "--mountpoint-namespace"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
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
					AdminAddr: ":8082", LeaderElect: true, MountpointNamespace: "mount-s3", Logging: o.Logging,
					DriverVersion: "dev", MaxConcurrentReconciles: 4, ResyncPeriod: 5 * time.Minute,
					StallTimeout: 5 * time.Minute, EventQueueSize: 10000, MountpointImage: "s3csi-mounter:dev",
					MountpointImagePullPolicy: "IfNotPresent",
				}
			},
		},
		{
			name: "the environment provides the NATS URL and the Mountpoint namespace",
			env:  map[string]string{"NATS_URL": "nats://env:4222", "MOUNTPOINT_NAMESPACE": "mp-env"},
			want: func(o *Options) { o.NATSURL = "nats://env:4222"; o.MountpointNamespace = "mp-env" },
		},
		{
			name: "the environment provides the driver version and the Mountpoint image",
			env:  map[string]string{"DRIVER_VERSION": "v1.2.3", "MOUNTPOINT_IMAGE": "registry/mounter:v1.2.3"},
			want: func(o *Options) { o.DriverVersion = "v1.2.3"; o.MountpointImage = "registry/mounter:v1.2.3" },
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
				"--driver-version=v2", "--max-concurrent-reconciles=8", "--resync-period=1m", "--stall-timeout=2m",
				"--event-queue-size=5", "--mountpoint-image=img", "--mountpoint-image-pull-policy=Never",
				"--mountpoint-priority-class-name=pc", "--mountpoint-service-account-name=sa",
				"--mountpoint-cpu-request=1", "--mountpoint-memory-request=2Mi", "--mountpoint-cpu-limit=3",
				"--mountpoint-memory-limit=4Mi",
			},
			want: func(o *Options) {
				o.DriverVersion, o.MaxConcurrentReconciles, o.ResyncPeriod, o.StallTimeout = "v2", 8, time.Minute, 2*time.Minute
				o.EventQueueSize, o.MountpointImage, o.MountpointImagePullPolicy = 5, "img", "Never"
				o.MountpointPriorityClassName, o.MountpointServiceAccountName = "pc", "sa"
				o.MountpointCPURequest, o.MountpointMemoryRequest, o.MountpointCPULimit, o.MountpointMemoryLimit = "1", "2Mi", "3", "4Mi"
				o.AdminAddr = "127.0.0.1:9000"
				o.Kubeconfig = "/k"
				o.LeaderElect = false
				o.LeaderElectionNamespace = "s3csi"
				o.Logging.Format = "text"
				o.Logging.Verbosity = 4
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
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
