package options

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/servicecmd"
	"github.com/s3csi/s3csi/shared/servicecmd/optionstest"
)

// The common options (--admin-address, --nats-url, --kubeconfig, logging) are tested in
// servicecmd; these tests cover the csi-controller's own and that the common ones are wired in.

func TestValidate(t *testing.T) {
	env := map[string]string{"NATS_URL": "", "AWS_ENDPOINT_URL": "https://s3.example.com"}
	keys := t.TempDir()
	if err := os.WriteFile(filepath.Join(keys, "key"), []byte(strings.Repeat("k", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := t.TempDir()
	if err := os.WriteFile(filepath.Join(short, "key"), []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	withKeys := func() *Options {
		o := New()
		o.OwnershipKeysDir = keys
		return o
	}
	optionstest.ValidateTable(t, env, withKeys, []optionstest.ValidateCase[*Options]{
		{Name: "the defaults with an S3 endpoint and ownership keys are valid", Modify: func(*Options) {}},
		{Name: "no ownership keys dir is rejected", Modify: func(o *Options) { o.OwnershipKeysDir = "" }, WantErr: []string{"--ownership-keys-dir", "required"}},
		{Name: "an ownership keys dir without the file key is rejected", Modify: func(o *Options) { o.OwnershipKeysDir = t.TempDir() }, WantErr: []string{"--ownership-keys-dir", "key"}},
		{Name: "a short ownership key is rejected", Modify: func(o *Options) { o.OwnershipKeysDir = short }, WantErr: []string{"--ownership-keys-dir", "at least 32"}},
		{Name: "a missing S3 endpoint is rejected with how to set it", Modify: func(o *Options) { o.S3Endpoint = "" }, WantErr: []string{"--s3-endpoint", "AWS_ENDPOINT_URL", "required"}},
		{Name: "an S3 endpoint without a scheme is rejected", Modify: func(o *Options) { o.S3Endpoint = "s3.example.com" }, WantErr: []string{"--s3-endpoint"}},
		{Name: "a bucket prefix with capitals is rejected", Modify: func(o *Options) { o.BucketPrefix = "CSI-" }, WantErr: []string{"--bucket-prefix"}},
		{Name: "a bucket prefix with a dot is rejected", Modify: func(o *Options) { o.BucketPrefix = "csi.s3-" }, WantErr: []string{"--bucket-prefix"}},
		{Name: "a bucket prefix starting with a hyphen is rejected", Modify: func(o *Options) { o.BucketPrefix = "-csi" }, WantErr: []string{"--bucket-prefix"}},
		{Name: "a reserved bucket prefix is rejected", Modify: func(o *Options) { o.BucketPrefix = "xn--a" }, WantErr: []string{"--bucket-prefix"}},
		{Name: "a long bucket prefix is rejected", Modify: func(o *Options) { o.BucketPrefix = strings.Repeat("a", 25) }, WantErr: []string{"--bucket-prefix"}},
		{Name: "an empty bucket prefix is valid", Modify: func(o *Options) { o.BucketPrefix = "" }},
		{Name: "a zero credentials cache TTL is rejected", Modify: func(o *Options) { o.CredentialsCacheTTL = 0 }, WantErr: []string{"--credentials-cache-ttl"}},
		{Name: "an empty driver version is rejected", Modify: func(o *Options) { o.DriverVersion = "" }, WantErr: []string{"--driver-version"}},
		{Name: "a TCP CSI endpoint is rejected", Modify: func(o *Options) { o.CSIEndpoint = "tcp://127.0.0.1:10000" }, WantErr: []string{"--csi-endpoint"}},
		{Name: "a relative CSI socket path is rejected", Modify: func(o *Options) { o.CSIEndpoint = "unix://csi.sock" }, WantErr: []string{"--csi-endpoint"}},
		{
			Name:    "every invalid option is reported at once, common ones included",
			Modify:  func(o *Options) { o.AdminAddr = ""; o.NATSURL = "localhost:4222"; o.CSIEndpoint = "" },
			WantErr: []string{"--admin-address", "--nats-url", "--csi-endpoint"},
		},
	})
}

func TestAddFlags(t *testing.T) {
	env := map[string]string{"NATS_URL": "", "AWS_ENDPOINT_URL": "", "AWS_REGION": ""}
	optionstest.FlagTable(t, env, New, []optionstest.FlagCase[*Options]{
		{
			Name: "without flags or environment the defaults apply",
			Want: func(o *Options) {
				*o = Options{
					CSIEndpoint: "unix:///csi/csi.sock", S3PathStyle: true,
					CredentialsCacheTTL: DefaultCredentialsCacheTTL, BucketPrefix: DefaultBucketPrefix,
					DriverVersion: "dev", CommonOptions: servicecmd.CommonOptions{AdminAddr: ":8081", NATSStreamReplicas: 1, Logging: o.Logging},
				}
			},
		},
		{
			Name: "AWS_ENDPOINT_URL and AWS_REGION are the S3 defaults",
			Env:  map[string]string{"AWS_ENDPOINT_URL": "https://env.example.com", "AWS_REGION": "eu-west-1"},
			Want: func(o *Options) { o.S3Endpoint = "https://env.example.com"; o.S3Region = "eu-west-1" },
		},
		{
			Name: "every flag is bound to its field",
			Args: []string{
				"--admin-address=127.0.0.1:9000", "--csi-endpoint=unix:///tmp/c.sock", "--nats-url=nats://n:4222",
				"--kubeconfig=/k", "--log-format=text", "-v=4",
				"--s3-endpoint=https://s3.example.com", "--s3-region=r1", "--s3-ca-bundle=/ca.pem", "--s3-path-style=false",
				"--credentials-dir=/creds", "--credentials-cache-ttl=1m", "--bucket-prefix=pv-", "--driver-version=v2.0.0",
				"--ownership-keys-dir=/keys",
			},
			Want: func(o *Options) {
				o.S3Endpoint, o.S3Region, o.S3CABundle, o.S3PathStyle = "https://s3.example.com", "r1", "/ca.pem", false
				o.CredentialsDir, o.CredentialsCacheTTL, o.BucketPrefix, o.DriverVersion = "/creds", time.Minute, "pv-", "v2.0.0"
				o.OwnershipKeysDir = "/keys"
				o.AdminAddr, o.CSIEndpoint, o.NATSURL, o.Kubeconfig = "127.0.0.1:9000", "unix:///tmp/c.sock", "nats://n:4222", "/k"
				o.Logging.Format, o.Logging.Verbosity = "text", 4
			},
		},
	})
}
