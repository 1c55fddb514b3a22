package servicecmd

import (
	"testing"

	"github.com/s3csi/s3csi/shared/logging"
	"github.com/s3csi/s3csi/shared/servicecmd/optionstest"
)

// newTestOptions returns the defaults of a service whose admin endpoint listens on :8080.
func newTestOptions() *CommonOptions {
	o := NewCommonOptions(":8080")
	return &o
}

func TestCommonOptionsAddFlags(t *testing.T) {
	optionstest.FlagTable(t, map[string]string{"NATS_URL": "", "NATS_STREAM_REPLICAS": ""}, newTestOptions, []optionstest.FlagCase[*CommonOptions]{
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
			Name: "the log level is also --log-level, -v being its shorthand",
			Args: []string{"--log-level=1"},
			Want: func(o *CommonOptions) { o.Logging.Verbosity = 1 },
		},
	})
}

func TestCommonOptionsValidate(t *testing.T) {
	optionstest.ValidateTable(t, map[string]string{"NATS_URL": "", "NATS_STREAM_REPLICAS": ""}, newTestOptions, []optionstest.ValidateCase[*CommonOptions]{
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

func TestStreamConfigCarriesTheReplicas(t *testing.T) {
	o := newTestOptions()
	optionstest.ParseFlags(t, o, "--nats-stream-replicas=3")
	if got := o.StreamConfig().Replicas; got != 3 {
		t.Errorf("StreamConfig().Replicas = %d, want 3", got)
	}
}
