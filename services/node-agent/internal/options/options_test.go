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
		{name: "the defaults with a node name are valid", modify: func(*Options) {}},
		{name: "several NATS servers are valid", modify: func(o *Options) { o.NATSURL = "nats://a:4222,wss://b:443" }},
		{name: "a missing node name is rejected", modify: func(o *Options) { o.NodeName = "" }, wantErr: []string{"--node-name is required", "NODE_NAME"}},
		{name: "an invalid node name is rejected", modify: func(o *Options) { o.NodeName = "Node_1" }, wantErr: []string{"--node-name"}},
		{name: "a relative kubelet directory is rejected", modify: func(o *Options) { o.KubeletDir = "var/lib/kubelet" }, wantErr: []string{"--kubelet-dir"}},
		{name: "a TCP CSI endpoint is rejected", modify: func(o *Options) { o.CSIEndpoint = "tcp://127.0.0.1:10000" }, wantErr: []string{"--csi-endpoint"}},
		{name: "an admin address without a port is rejected", modify: func(o *Options) { o.AdminAddr = "localhost" }, wantErr: []string{"--admin-address"}},
		{name: "a NATS URL without a scheme is rejected", modify: func(o *Options) { o.NATSURL = "localhost:4222" }, wantErr: []string{"--nats-url"}},
		{name: "a zero attachment re-read period is rejected", modify: func(o *Options) { o.AttachmentRereadPeriod = 0 }, wantErr: []string{"--attachment-reread-period"}},
		{name: "a sub-second cleanup period is rejected", modify: func(o *Options) { o.CleanupPeriod = time.Millisecond }, wantErr: []string{"--cleanup-period"}},
		{name: "an S3 endpoint without a scheme is rejected", modify: func(o *Options) { o.S3EndpointURL = "s3.example.com" }, wantErr: []string{"--s3-endpoint-url"}},
		{name: "an invalid mountpoint namespace is rejected", modify: func(o *Options) { o.MountpointNamespace = "Mount_S3" }, wantErr: []string{"--mountpoint-namespace"}},
		{name: "a malformed driver access key is rejected without showing it", modify: func(o *Options) {
			o.DriverCredentials.AccessKeyID, o.DriverCredentials.SecretAccessKey = "bad key!", "secret-canary"
		}, wantErr: []string{"driver credentials"}},
		{name: "an unknown log format is rejected", modify: func(o *Options) { o.Logging.Format = "xml" }, wantErr: []string{"--log-format"}},
		{
			name:    "every invalid option is reported at once",
			modify:  func(o *Options) { o.NodeName = ""; o.KubeletDir = "" },
			wantErr: []string{"--node-name", "--kubelet-dir"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NATS_URL", "")
			t.Setenv("NODE_NAME", "node-a")
			o := New()
			tt.modify(o)
			err := o.Validate()
			if err != nil && strings.Contains(err.Error(), "secret-canary") {
				t.Fatalf("Validate() shows a secret: %v", err)
			}
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
			name: "without flags or environment the defaults apply and the node name is empty",
			want: func(o *Options) {
				*o = Options{
					AdminAddr:              ":8083",
					KubeletDir:             "/var/lib/kubelet",
					CSIEndpoint:            "unix:///var/lib/kubelet/plugins/s3.csi.scality.com/csi.sock",
					MountpointNamespace:    "mount-s3",
					AttachmentRereadPeriod: 2 * time.Second,
					CleanupPeriod:          time.Minute,
					S3Region:               "us-east-1",
					S3PathStyle:            true,
					RegisterWithKubelet:    true,
					RemoveStartupTaint:     true,
					Logging:                o.Logging,
				}
			},
		},
		{
			name: "the environment provides the node name and the NATS URL",
			env:  map[string]string{"NODE_NAME": "node-env", "NATS_URL": "nats://env:4222"},
			want: func(o *Options) { o.NodeName = "node-env"; o.NATSURL = "nats://env:4222" },
		},
		{
			name: "flags override the environment",
			env:  map[string]string{"NODE_NAME": "node-env", "NATS_URL": "nats://env:4222"},
			args: []string{"--node-name=node-flag", "--nats-url=nats://flag:4222"},
			want: func(o *Options) { o.NodeName = "node-flag"; o.NATSURL = "nats://flag:4222" },
		},
		{
			name: "every flag is bound to its field",
			args: []string{
				"--admin-address=127.0.0.1:9000", "--kubelet-dir=/k8s/kubelet",
				"--csi-endpoint=unix:///tmp/n.sock", "--kubeconfig=/k", "--log-format=text", "-v=4",
				"--mountpoint-namespace=mp", "--attachment-reread-period=3s", "--cleanup-period=5m",
				"--s3-endpoint-url=https://s3.example.com", "--s3-region=eu-west-1", "--s3-path-style=false",
				"--register-with-kubelet=false", "--remove-startup-taint=false",
			},
			want: func(o *Options) {
				o.AdminAddr = "127.0.0.1:9000"
				o.KubeletDir = "/k8s/kubelet"
				o.CSIEndpoint = "unix:///tmp/n.sock"
				o.Kubeconfig = "/k"
				o.Logging.Format = "text"
				o.Logging.Verbosity = 4
				o.MountpointNamespace = "mp"
				o.AttachmentRereadPeriod = 3 * time.Second
				o.CleanupPeriod = 5 * time.Minute
				o.S3EndpointURL = "https://s3.example.com"
				o.S3Region = "eu-west-1"
				o.S3PathStyle = false
				o.RegisterWithKubelet = false
				o.RemoveStartupTaint = false
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"NATS_URL", "NODE_NAME", "MOUNTPOINT_NAMESPACE", "AWS_ENDPOINT_URL", "AWS_REGION",
				"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
				t.Setenv(k, "")
			}
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
