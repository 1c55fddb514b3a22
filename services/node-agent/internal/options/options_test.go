package options

import (
	"strings"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/servicecmd"
	"github.com/s3csi/s3csi/shared/servicecmd/optionstest"
)

func TestValidate(t *testing.T) {
	env := map[string]string{"NATS_URL": "", "NODE_NAME": "node-a"}
	optionstest.ValidateTable(t, env, New, []optionstest.ValidateCase[*Options]{
		{Name: "the defaults with a node name are valid", Modify: func(*Options) {}},
		{Name: "a missing node name is rejected", Modify: func(o *Options) { o.NodeName = "" }, WantErr: []string{"--node-name is required", "NODE_NAME"}},
		{Name: "an invalid node name is rejected", Modify: func(o *Options) { o.NodeName = "Node_1" }, WantErr: []string{"--node-name"}},
		{Name: "a relative kubelet directory is rejected", Modify: func(o *Options) { o.KubeletDir = "var/lib/kubelet" }, WantErr: []string{"--kubelet-dir"}},
		{Name: "a TCP CSI endpoint is rejected", Modify: func(o *Options) { o.CSIEndpoint = "tcp://127.0.0.1:10000" }, WantErr: []string{"--csi-endpoint"}},
		{Name: "a zero API request rate is rejected", Modify: func(o *Options) { o.KubeAPIQPS = 0 }, WantErr: []string{"--kube-api-qps"}},
		{Name: "a zero attachment re-read period is rejected", Modify: func(o *Options) { o.AttachmentRereadPeriod = 0 }, WantErr: []string{"--attachment-reread-period"}},
		{Name: "a health period under 100ms is rejected", Modify: func(o *Options) { o.HealthPeriod = time.Millisecond }, WantErr: []string{"--health-period"}},
		{Name: "a resume wait under 1s is rejected", Modify: func(o *Options) { o.ResumeWait = 0 }, WantErr: []string{"--resume-wait"}},
		{Name: "a replay wait under 1s is rejected", Modify: func(o *Options) { o.ReplayWait = time.Millisecond }, WantErr: []string{"--replay-wait"}},
		{Name: "a sub-second cleanup period is rejected", Modify: func(o *Options) { o.CleanupPeriod = time.Millisecond }, WantErr: []string{"--cleanup-period"}},
		{Name: "an S3 endpoint without a scheme is rejected", Modify: func(o *Options) { o.S3EndpointURL = "s3.example.com" }, WantErr: []string{"--s3-endpoint-url"}},
		{Name: "a relative CA bundle path is rejected", Modify: func(o *Options) { o.S3CABundle = "ca.crt" }, WantErr: []string{"--s3-ca-bundle"}},
		{Name: "an absolute CA bundle path is valid", Modify: func(o *Options) { o.S3CABundle = "/etc/s3csi/s3-ca/ca.crt" }},
		{Name: "a mountpoint image with a space is rejected", Modify: func(o *Options) { o.MountpointImage = "s3csi/mounter :1" }, WantErr: []string{"--mountpoint-image"}},
		{Name: "an invalid mountpoint namespace is rejected", Modify: func(o *Options) { o.MountpointNamespace = "Mount_S3" }, WantErr: []string{"--mountpoint-namespace"}},
		{
			Name:    "every invalid option is reported at once, common ones included",
			Modify:  func(o *Options) { o.AdminAddr = ""; o.NATSURL = "localhost:4222"; o.NodeName = ""; o.KubeletDir = "" },
			WantErr: []string{"--admin-address", "--nats-url", "--node-name", "--kubelet-dir"},
		},
	})
}

func TestAddFlags(t *testing.T) {
	env := map[string]string{
		"NATS_URL": "", "NODE_NAME": "", "MOUNTPOINT_NAMESPACE": "", "MOUNTPOINT_IMAGE": "", "AWS_ENDPOINT_URL": "", "AWS_REGION": "",
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_WEB_IDENTITY_TOKEN_FILE": "",
	}
	optionstest.FlagTable(t, env, New, []optionstest.FlagCase[*Options]{
		{
			Name: "without flags or environment the defaults apply and the node name is empty",
			Want: func(o *Options) {
				*o = Options{
					CommonOptions:          servicecmd.CommonOptions{AdminAddr: ":8083", NATSStreamReplicas: 1, Logging: o.Logging},
					KubeAPIOptions:         servicecmd.KubeAPIOptions{KubeAPIQPS: 50, KubeAPIBurst: 100},
					KubeletDir:             "/var/lib/kubelet",
					CSIEndpoint:            "unix:///var/lib/kubelet/plugins/s3.csi.scality.com/csi.sock",
					MountpointNamespace:    "mount-s3",
					AttachmentRereadPeriod: 2 * time.Second,
					CleanupPeriod:          time.Minute,
					HealthPeriod:           5 * time.Second,
					ResumeWait:             time.Minute,
					ReplayWait:             5 * time.Minute,
					S3Region:               "us-east-1",
					S3PathStyle:            true,
					RegisterWithKubelet:    true,
					RemoveStartupTaint:     true,
				}
			},
		},
		{
			Name: "the environment provides the node name",
			Env:  map[string]string{"NODE_NAME": "node-env"},
			Want: func(o *Options) { o.NodeName = "node-env" },
		},
		{
			Name: "flags override the environment",
			Env:  map[string]string{"NODE_NAME": "node-env"},
			Args: []string{"--node-name=node-flag"},
			Want: func(o *Options) { o.NodeName = "node-flag" },
		},
		{
			Name: "every flag is bound to its field",
			Args: []string{
				"--admin-address=127.0.0.1:9000", "--nats-url=nats://n:4222", "--kubelet-dir=/k8s/kubelet",
				"--csi-endpoint=unix:///tmp/n.sock", "--kubeconfig=/k", "--log-format=text", "-v=4",
				"--mountpoint-namespace=mp", "--mountpoint-image=r.example/s3csi/mounter:1", "--attachment-reread-period=3s", "--cleanup-period=5m", "--health-period=2s", "--legacy-token-file=/t",
				"--resume-wait=3m", "--replay-wait=10m",
				"--s3-endpoint-url=https://s3.example.com", "--s3-region=eu-west-1", "--s3-path-style=false", "--s3-ca-bundle=/ca.crt",
				"--register-with-kubelet=false", "--remove-startup-taint=false", "--kube-api-qps=20", "--kube-api-burst=40",
			},
			Want: func(o *Options) {
				o.AdminAddr = "127.0.0.1:9000"
				o.NATSURL = "nats://n:4222"
				o.KubeletDir = "/k8s/kubelet"
				o.CSIEndpoint = "unix:///tmp/n.sock"
				o.Kubeconfig = "/k"
				o.Logging.Format = "text"
				o.Logging.Verbosity = 4
				o.MountpointNamespace = "mp"
				o.MountpointImage = "r.example/s3csi/mounter:1"
				o.AttachmentRereadPeriod = 3 * time.Second
				o.CleanupPeriod = 5 * time.Minute
				o.HealthPeriod = 2 * time.Second
				o.ResumeWait = 3 * time.Minute
				o.ReplayWait = 10 * time.Minute
				o.LegacyTokenFile = "/t"
				o.S3EndpointURL = "https://s3.example.com"
				o.S3Region = "eu-west-1"
				o.S3PathStyle = false
				o.S3CABundle = "/ca.crt"
				o.RegisterWithKubelet = false
				o.RemoveStartupTaint = false
				o.KubeAPIQPS = 20
				o.KubeAPIBurst = 40
			},
		},
	})
}

// TestValidateNeverShowsTheDriverSecret guards the rule that secrets stay out of logs: main prints
// Validate's error.
func TestValidateNeverShowsTheDriverSecret(t *testing.T) {
	t.Setenv("NODE_NAME", "node-a")
	o := New()
	o.DriverCredentials.AccessKeyID, o.DriverCredentials.SecretAccessKey = "bad key!", "secret-canary"
	err := o.Validate()
	optionstest.CheckErrors(t, err, "driver credentials")
	if err != nil && strings.Contains(err.Error(), "secret-canary") {
		t.Errorf("Validate() shows the secret: %v", err)
	}
}
