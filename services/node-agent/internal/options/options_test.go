package options

import (
	"strings"
	"testing"

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
					AdminAddr:   ":8083",
					KubeletDir:  "/var/lib/kubelet",
					CSIEndpoint: "unix:///var/lib/kubelet/plugins/s3.csi.scality.com/csi.sock",
					Logging:     o.Logging,
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
			},
			want: func(o *Options) {
				o.AdminAddr = "127.0.0.1:9000"
				o.KubeletDir = "/k8s/kubelet"
				o.CSIEndpoint = "unix:///tmp/n.sock"
				o.Kubeconfig = "/k"
				o.Logging.Format = "text"
				o.Logging.Verbosity = 4
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NATS_URL", "")
			t.Setenv("NODE_NAME", "")
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
