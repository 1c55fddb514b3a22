package options

import (
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/servicecmd"
	"github.com/s3csi/s3csi/shared/servicecmd/optionstest"
)

// clearedEnv clears every variable New reads, so the host's environment cannot leak in.
var clearedEnv = map[string]string{"NATS_URL": "", "MOUNTPOINT_NAMESPACE": "", "DRIVER_VERSION": "", "MOUNTPOINT_IMAGE": ""}

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
	optionstest.ValidateTable(t, clearedEnv, New, []optionstest.ValidateCase[*Options]{
		{Name: "the defaults are valid", Modify: func(*Options) {}},
		{Name: "an empty Mountpoint namespace is rejected", Modify: func(o *Options) { o.MountpointNamespace = "" }, WantErr: []string{"--mountpoint-namespace"}},
		{Name: "an invalid Mountpoint namespace is rejected", Modify: func(o *Options) { o.MountpointNamespace = "Mount_S3" }, WantErr: []string{"--mountpoint-namespace"}},
		{
			Name: "resources and a priority class are valid",
			Modify: func(o *Options) {
				o.MountpointCPURequest, o.MountpointMemoryLimit, o.MountpointPriorityClassName = "100m", "256Mi", "mount-s3-critical"
			},
		},
		{Name: "zero concurrent reconciles are rejected", Modify: func(o *Options) { o.MaxConcurrentReconciles = 0 }, WantErr: []string{"--max-concurrent-reconciles"}},
		{Name: "a resync period of a second is rejected", Modify: func(o *Options) { o.ResyncPeriod = time.Second }, WantErr: []string{"--resync-period"}},
		{Name: "a stall timeout of a second is rejected", Modify: func(o *Options) { o.StallTimeout = time.Second }, WantErr: []string{"--stall-timeout"}},
		{Name: "an empty event queue is rejected", Modify: func(o *Options) { o.EventQueueSize = 0 }, WantErr: []string{"--event-queue-size"}},
		{Name: "an empty Mountpoint image is rejected", Modify: func(o *Options) { o.MountpointImage = " " }, WantErr: []string{"--mountpoint-image"}},
		{Name: "an unknown pull policy is rejected", Modify: func(o *Options) { o.MountpointImagePullPolicy = "Sometimes" }, WantErr: []string{"--mountpoint-image-pull-policy"}},
		{Name: "a driver version that is no label value is rejected", Modify: func(o *Options) { o.DriverVersion = "v1/2" }, WantErr: []string{"--driver-version"}},
		{Name: "an invalid pull Secret name is rejected", Modify: func(o *Options) { o.MountpointImagePullSecrets = "regcred,Not_Valid" }, WantErr: []string{"--mountpoint-image-pull-secrets", "Not_Valid"}},
		{Name: "an invalid priority class is rejected", Modify: func(o *Options) { o.MountpointPriorityClassName = "Not Valid" }, WantErr: []string{"--mountpoint-priority-class-name"}},
		{Name: "a termination grace period of zero is rejected", Modify: func(o *Options) { o.MountpointTerminationGracePeriod = 0 }, WantErr: []string{"--mountpoint-termination-grace-period"}},
		{Name: "a termination grace period in fractions of a second is rejected", Modify: func(o *Options) { o.MountpointTerminationGracePeriod = 1500 * time.Millisecond }, WantErr: []string{"--mountpoint-termination-grace-period"}},
		{Name: "an invalid service account is rejected", Modify: func(o *Options) { o.MountpointServiceAccountName = "_sa" }, WantErr: []string{"--mountpoint-service-account-name"}},
		{Name: "a negative memory limit is rejected", Modify: func(o *Options) { o.MountpointMemoryLimit = "-1Mi" }, WantErr: []string{"--mountpoint-memory-limit"}},
		{Name: "a CPU request that is no quantity is rejected", Modify: func(o *Options) { o.MountpointCPURequest = "lots" }, WantErr: []string{"--mountpoint-cpu-request"}},
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
					CommonOptions:             servicecmd.CommonOptions{AdminAddr: ":8082", NATSStreamReplicas: 1, Logging: o.Logging},
					LeaderElectionOptions:     servicecmd.LeaderElectionOptions{LeaderElect: true},
					MountpointNamespace:       "mount-s3",
					DriverVersion:             "dev",
					MaxConcurrentReconciles:   4,
					ResyncPeriod:              5 * time.Minute,
					StallTimeout:              5 * time.Minute,
					EventQueueSize:            10000,
					MountpointImage:           "s3csi-mounter:dev",
					MountpointImagePullPolicy: "IfNotPresent",

					MountpointTerminationGracePeriod: 10 * time.Minute,
				}
			},
		},
		{
			Name: "the environment provides the Mountpoint namespace",
			Env:  map[string]string{"MOUNTPOINT_NAMESPACE": "mp-env"},
			Want: func(o *Options) { o.MountpointNamespace = "mp-env" },
		},
		{
			Name: "the environment provides the driver version and the Mountpoint image",
			Env:  map[string]string{"DRIVER_VERSION": "v1.2.3", "MOUNTPOINT_IMAGE": "registry/mounter:v1.2.3"},
			Want: func(o *Options) { o.DriverVersion = "v1.2.3"; o.MountpointImage = "registry/mounter:v1.2.3" },
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
				"--driver-version=v2", "--max-concurrent-reconciles=8", "--resync-period=1m", "--stall-timeout=2m",
				"--event-queue-size=5", "--mountpoint-image=img", "--mountpoint-image-pull-policy=Never",
				"--mountpoint-priority-class-name=pc", "--mountpoint-service-account-name=sa",
				"--mountpoint-image-pull-secrets=regcred,mirror",
				"--mountpoint-cpu-request=1", "--mountpoint-memory-request=2Mi", "--mountpoint-cpu-limit=3",
				"--mountpoint-memory-limit=4Mi", "--mountpoint-termination-grace-period=90s",
			},
			Want: func(o *Options) {
				o.DriverVersion, o.MaxConcurrentReconciles, o.ResyncPeriod, o.StallTimeout = "v2", 8, time.Minute, 2*time.Minute
				o.EventQueueSize, o.MountpointImage, o.MountpointImagePullPolicy = 5, "img", "Never"
				o.MountpointPriorityClassName, o.MountpointServiceAccountName = "pc", "sa"
				o.MountpointImagePullSecrets = "regcred,mirror"
				o.MountpointTerminationGracePeriod = 90 * time.Second
				o.MountpointCPURequest, o.MountpointMemoryRequest, o.MountpointCPULimit, o.MountpointMemoryLimit = "1", "2Mi", "3", "4Mi"
				o.AdminAddr = "127.0.0.1:9000"
				o.NATSURL = "nats://n:4222"
				o.Kubeconfig = "/k"
				o.LeaderElect = false
				o.LeaderElectionNamespace = "s3csi"
				o.Logging.Format = "text"
				o.Logging.Verbosity = 4
			},
		},
	})
}
