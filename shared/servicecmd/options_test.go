package servicecmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/logging"
	"github.com/s3csi/s3csi/shared/servicecmd/optionstest"
)

// noNATSEnv clears every environment variable the common options read.
var noNATSEnv = map[string]string{"NATS_URL": "", "NATS_STREAM_REPLICAS": "", "NATS_USER": "", "NATS_PASSWORD_FILE": "", "NATS_TLS_CA_FILE": "", "NATS_TLS_CERT_FILE": "", "NATS_TLS_KEY_FILE": ""}

// newTestOptions returns the defaults of a service whose admin endpoint listens on :8080.
func newTestOptions() *CommonOptions {
	o := NewCommonOptions(":8080")
	return &o
}

func TestCommonOptionsAddFlags(t *testing.T) {
	optionstest.FlagTable(t, noNATSEnv, newTestOptions, []optionstest.FlagCase[*CommonOptions]{
		{
			Name: "without flags or environment the defaults apply",
			Want: func(o *CommonOptions) {
				*o = CommonOptions{AdminAddr: ":8080", NATSStreamReplicas: 1, Logging: logging.Options{Format: "json"}}
			},
		},
		{
			Name: "NATS_STREAM_REPLICAS from the environment is the default",
			Env:  map[string]string{"NATS_STREAM_REPLICAS": "3"},
			Want: func(o *CommonOptions) { o.NATSStreamReplicas = 3 },
		},
		{
			Name: "a NATS_STREAM_REPLICAS that is not a number becomes 0, which Validate rejects",
			Env:  map[string]string{"NATS_STREAM_REPLICAS": "three"},
			Want: func(o *CommonOptions) { o.NATSStreamReplicas = 0 },
		},
		{
			Name: "the replicas flag overrides the environment",
			Env:  map[string]string{"NATS_STREAM_REPLICAS": "3"},
			Args: []string{"--nats-stream-replicas=5"},
			Want: func(o *CommonOptions) { o.NATSStreamReplicas = 5 },
		},
		{
			Name: "NATS_URL from the environment is the default",
			Env:  map[string]string{"NATS_URL": "nats://env:4222"},
			Want: func(o *CommonOptions) { o.NATSURL = "nats://env:4222" },
		},
		{
			Name: "a flag overrides the environment",
			Env:  map[string]string{"NATS_URL": "nats://env:4222"},
			Args: []string{"--nats-url=nats://flag:4222"},
			Want: func(o *CommonOptions) { o.NATSURL = "nats://flag:4222" },
		},
		{
			Name: "every flag is bound to its field",
			Args: []string{
				"--admin-address=127.0.0.1:9000", "--nats-url=nats://n:4222", "--nats-stream-replicas=2", "--kubeconfig=/k",
				"--log-format=text", "-v=4",
			},
			Want: func(o *CommonOptions) {
				o.AdminAddr, o.NATSURL, o.Kubeconfig = "127.0.0.1:9000", "nats://n:4222", "/k"
				o.NATSStreamReplicas = 2
				o.Logging = logging.Options{Format: "text", Verbosity: 4}
			},
		},
		{
			Name: "the NATS authentication comes from the environment by default",
			Env: map[string]string{"NATS_USER": "janitor", "NATS_PASSWORD_FILE": "/s/password",
				"NATS_TLS_CA_FILE": "/t/ca.crt", "NATS_TLS_CERT_FILE": "/t/tls.crt", "NATS_TLS_KEY_FILE": "/t/tls.key"},
			Want: func(o *CommonOptions) {
				o.NATSAuth = events.Auth{User: "janitor", PasswordFile: "/s/password",
					TLSCAFile: "/t/ca.crt", TLSCertFile: "/t/tls.crt", TLSKeyFile: "/t/tls.key"}
			},
		},
		{
			Name: "every NATS authentication flag is bound to its field",
			Env:  map[string]string{"NATS_USER": "env"},
			Args: []string{"--nats-user=janitor", "--nats-password-file=/s/password", "--nats-tls-ca-file=/t/ca.crt",
				"--nats-tls-cert-file=/t/tls.crt", "--nats-tls-key-file=/t/tls.key"},
			Want: func(o *CommonOptions) {
				o.NATSAuth = events.Auth{User: "janitor", PasswordFile: "/s/password",
					TLSCAFile: "/t/ca.crt", TLSCertFile: "/t/tls.crt", TLSKeyFile: "/t/tls.key"}
			},
		},
		{
			Name: "the log level is also --log-level, -v being its shorthand",
			Args: []string{"--log-level=1"},
			Want: func(o *CommonOptions) { o.Logging.Verbosity = 1 },
		},
	})
}

func TestCommonOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	password, empty, pem, missing := writeFile(t, dir, "password", "s3cr3t\n"), writeFile(t, dir, "empty", ""),
		writeFile(t, dir, "pem", "-----BEGIN CERTIFICATE-----\n"), filepath.Join(dir, "missing")
	optionstest.ValidateTable(t, noNATSEnv, newTestOptions, []optionstest.ValidateCase[*CommonOptions]{
		{Name: "the defaults are valid", Modify: func(*CommonOptions) {}},
		{Name: "port 0 for tests is valid", Modify: func(o *CommonOptions) { o.AdminAddr = "127.0.0.1:0" }},
		{Name: "several NATS servers are valid", Modify: func(o *CommonOptions) { o.NATSURL = "nats://a:4222, tls://b:4222" }},
		{Name: "an admin address without a port is rejected", Modify: func(o *CommonOptions) { o.AdminAddr = "localhost" }, WantErr: []string{"--admin-address"}},
		{Name: "an empty admin address is rejected", Modify: func(o *CommonOptions) { o.AdminAddr = "" }, WantErr: []string{"--admin-address"}},
		{Name: "a NATS URL without a scheme is rejected", Modify: func(o *CommonOptions) { o.NATSURL = "localhost:4222" }, WantErr: []string{"--nats-url: want nats://"}},
		{Name: "a NATS URL without a host is rejected", Modify: func(o *CommonOptions) { o.NATSURL = "nats://" }, WantErr: []string{"--nats-url", "has no host"}},
		{Name: "three stream replicas are valid", Modify: func(o *CommonOptions) { o.NATSStreamReplicas = 3 }},
		{Name: "five stream replicas, the most JetStream keeps, are valid", Modify: func(o *CommonOptions) { o.NATSStreamReplicas = 5 }},
		{Name: "zero stream replicas are rejected", Modify: func(o *CommonOptions) { o.NATSStreamReplicas = 0 }, WantErr: []string{"--nats-stream-replicas", "NATS_STREAM_REPLICAS", "not in 1..5"}},
		{Name: "six stream replicas are rejected", Modify: func(o *CommonOptions) { o.NATSStreamReplicas = 6 }, WantErr: []string{"--nats-stream-replicas"}},
		{Name: "an unknown log format is rejected", Modify: func(o *CommonOptions) { o.Logging.Format = "xml" }, WantErr: []string{"--log-format"}},
		{Name: "a log level past the maximum is rejected", Modify: func(o *CommonOptions) { o.Logging.Verbosity = 99 }, WantErr: []string{"--log-level"}},
		{Name: "a NATS user with a readable password file is valid", Modify: func(o *CommonOptions) {
			o.NATSURL, o.NATSAuth = "nats://n:4222", events.Auth{User: "janitor", PasswordFile: password}
		}},
		{Name: "TLS with a CA and a client certificate is valid", Modify: func(o *CommonOptions) {
			o.NATSURL, o.NATSAuth = "tls://n:4222", events.Auth{TLSCAFile: pem, TLSCertFile: pem, TLSKeyFile: pem}
		}},
		{Name: "a password file that does not exist is rejected, naming the flag", Modify: func(o *CommonOptions) {
			o.NATSURL, o.NATSAuth = "nats://n:4222", events.Auth{User: "janitor", PasswordFile: missing}
		}, WantErr: []string{"--nats-password-file", "no such file"}},
		{Name: "an empty password file is rejected", Modify: func(o *CommonOptions) {
			o.NATSURL, o.NATSAuth = "nats://n:4222", events.Auth{User: "janitor", PasswordFile: empty}
		}, WantErr: []string{"--nats-password-file", "empty"}},
		{Name: "a NATS user without a password file is rejected", Modify: func(o *CommonOptions) {
			o.NATSURL, o.NATSAuth.User = "nats://n:4222", "janitor"
		}, WantErr: []string{"--nats-user and --nats-password-file"}},
		{Name: "a CA file that does not exist is rejected, naming the flag", Modify: func(o *CommonOptions) {
			o.NATSURL, o.NATSAuth.TLSCAFile = "tls://n:4222", missing
		}, WantErr: []string{"--nats-tls-ca-file", "no such file"}},
		{Name: "a client certificate without its key is rejected", Modify: func(o *CommonOptions) {
			o.NATSURL, o.NATSAuth.TLSCertFile = "tls://n:4222", pem
		}, WantErr: []string{"--nats-tls-cert-file and --nats-tls-key-file"}},
		{Name: "credentials without a NATS URL are rejected", Modify: func(o *CommonOptions) {
			o.NATSAuth = events.Auth{User: "janitor", PasswordFile: password}
		}, WantErr: []string{"without --nats-url"}},
		{
			Name:    "every invalid option is reported at once",
			Modify:  func(o *CommonOptions) { o.AdminAddr, o.NATSURL, o.Logging.Format = "", "x", "xml" },
			WantErr: []string{"--admin-address", "--nats-url", "--log-format"},
		},
	})
}

func TestLoggingOptionsAreTheParsedLoggingFlags(t *testing.T) {
	o := newTestOptions()
	optionstest.ParseFlags(t, o, "--log-format=text", "-v=1")
	if got, want := o.LoggingOptions(), (logging.Options{Format: "text", Verbosity: 1}); got != want {
		t.Errorf("LoggingOptions() = %+v, want %+v", got, want)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidateNeverShowsThePassword(t *testing.T) {
	o := newTestOptions()
	o.NATSAuth = events.Auth{User: "janitor", PasswordFile: writeFile(t, t.TempDir(), "password", "s3cr3t-value")}
	o.AdminAddr = "" // some other error, so Validate has something to say
	err := o.Validate()
	if err == nil || strings.Contains(err.Error(), "s3cr3t-value") {
		t.Fatalf("Validate() = %v: want an error that does not show the password", err)
	}
}

func TestStreamConfigCarriesTheReplicas(t *testing.T) {
	o := newTestOptions()
	optionstest.ParseFlags(t, o, "--nats-stream-replicas=3")
	if got := o.StreamConfig().Replicas; got != 3 {
		t.Errorf("StreamConfig().Replicas = %d, want 3", got)
	}
}
