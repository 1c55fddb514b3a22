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
		{name: "the defaults are valid", modify: func(*Options) {}},
		{name: "several NATS servers are valid", modify: func(o *Options) { o.NATSURL = "nats://a:4222, tls://b:4222" }},
		{name: "an admin address without a port is rejected", modify: func(o *Options) { o.AdminAddr = "localhost" }, wantErr: []string{"--admin-address"}},
		{name: "a TCP CSI endpoint is rejected", modify: func(o *Options) { o.CSIEndpoint = "tcp://127.0.0.1:10000" }, wantErr: []string{"--csi-endpoint"}},
		{name: "a relative CSI socket path is rejected", modify: func(o *Options) { o.CSIEndpoint = "unix://csi.sock" }, wantErr: []string{"--csi-endpoint"}},
		{name: "a NATS URL without a scheme is rejected", modify: func(o *Options) { o.NATSURL = "localhost:4222" }, wantErr: []string{"--nats-url"}},
		{name: "a NATS URL without a host is rejected", modify: func(o *Options) { o.NATSURL = "nats://" }, wantErr: []string{"--nats-url"}},
		{name: "an unknown log format is rejected", modify: func(o *Options) { o.Logging.Format = "xml" }, wantErr: []string{"--log-format"}},
		{
			name:    "every invalid option is reported at once",
			modify:  func(o *Options) { o.AdminAddr = ""; o.CSIEndpoint = "" },
			wantErr: []string{"--admin-address", "--csi-endpoint"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NATS_URL", "")
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
				*o = Options{AdminAddr: ":8081", CSIEndpoint: "unix:///csi/csi.sock", Logging: o.Logging}
			},
		},
		{
			name: "NATS_URL from the environment is the default",
			env:  map[string]string{"NATS_URL": "nats://env:4222"},
			want: func(o *Options) { o.NATSURL = "nats://env:4222" },
		},
		{
			name: "a flag overrides the environment",
			env:  map[string]string{"NATS_URL": "nats://env:4222"},
			args: []string{"--nats-url=nats://flag:4222"},
			want: func(o *Options) { o.NATSURL = "nats://flag:4222" },
		},
		{
			name: "every flag is bound to its field",
			args: []string{
				"--admin-address=127.0.0.1:9000", "--csi-endpoint=unix:///tmp/c.sock",
				"--kubeconfig=/k", "--log-format=text", "-v=4",
			},
			want: func(o *Options) {
				o.AdminAddr = "127.0.0.1:9000"
				o.CSIEndpoint = "unix:///tmp/c.sock"
				o.Kubeconfig = "/k"
				o.Logging.Format = "text"
				o.Logging.Verbosity = 4
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NATS_URL", "")
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
