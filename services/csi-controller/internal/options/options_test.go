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
		{name: "the defaults with an S3 endpoint are valid", modify: func(*Options) {}},
		{name: "a missing S3 endpoint is rejected with how to set it", modify: func(o *Options) { o.S3Endpoint = "" }, wantErr: []string{"--s3-endpoint", "AWS_ENDPOINT_URL", "required"}},
		{name: "an S3 endpoint without a scheme is rejected", modify: func(o *Options) { o.S3Endpoint = "s3.example.com" }, wantErr: []string{"--s3-endpoint"}},
		{name: "a bucket prefix with capitals is rejected", modify: func(o *Options) { o.BucketPrefix = "CSI-" }, wantErr: []string{"--bucket-prefix"}},
		{name: "a bucket prefix with a dot is rejected", modify: func(o *Options) { o.BucketPrefix = "csi.s3-" }, wantErr: []string{"--bucket-prefix"}},
		{name: "a bucket prefix starting with a hyphen is rejected", modify: func(o *Options) { o.BucketPrefix = "-csi" }, wantErr: []string{"--bucket-prefix"}},
		{name: "a reserved bucket prefix is rejected", modify: func(o *Options) { o.BucketPrefix = "xn--a" }, wantErr: []string{"--bucket-prefix"}},
		{name: "a long bucket prefix is rejected", modify: func(o *Options) { o.BucketPrefix = strings.Repeat("a", 25) }, wantErr: []string{"--bucket-prefix"}},
		{name: "an empty bucket prefix is valid", modify: func(o *Options) { o.BucketPrefix = "" }},
		{name: "a zero credentials cache TTL is rejected", modify: func(o *Options) { o.CredentialsCacheTTL = 0 }, wantErr: []string{"--credentials-cache-ttl"}},
		{name: "an empty driver version is rejected", modify: func(o *Options) { o.DriverVersion = "" }, wantErr: []string{"--driver-version"}},
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
			t.Setenv("AWS_ENDPOINT_URL", "https://s3.example.com")
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
					AdminAddr: ":8081", CSIEndpoint: "unix:///csi/csi.sock", S3PathStyle: true,
					CredentialsCacheTTL: DefaultCredentialsCacheTTL, BucketPrefix: DefaultBucketPrefix,
					DriverVersion: "dev", Logging: o.Logging,
				}
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
			name: "AWS_ENDPOINT_URL and AWS_REGION are the S3 defaults",
			env:  map[string]string{"AWS_ENDPOINT_URL": "https://env.example.com", "AWS_REGION": "eu-west-1"},
			want: func(o *Options) { o.S3Endpoint = "https://env.example.com"; o.S3Region = "eu-west-1" },
		},
		{
			name: "every flag is bound to its field",
			args: []string{
				"--admin-address=127.0.0.1:9000", "--csi-endpoint=unix:///tmp/c.sock",
				"--kubeconfig=/k", "--log-format=text", "-v=4",
				"--s3-endpoint=https://s3.example.com", "--s3-region=r1", "--s3-ca-bundle=/ca.pem", "--s3-path-style=false",
				"--credentials-dir=/creds", "--credentials-cache-ttl=1m", "--bucket-prefix=pv-", "--driver-version=v2.0.0",
			},
			want: func(o *Options) {
				o.S3Endpoint, o.S3Region, o.S3CABundle, o.S3PathStyle = "https://s3.example.com", "r1", "/ca.pem", false
				o.CredentialsDir, o.CredentialsCacheTTL, o.BucketPrefix, o.DriverVersion = "/creds", time.Minute, "pv-", "v2.0.0"
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
			t.Setenv("AWS_ENDPOINT_URL", "")
			t.Setenv("AWS_REGION", "")
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
