package servicecmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serviceOptions is a service's Options as the services write them: CommonOptions embedded, a
// flag of its own, and a Validate that joins both.
type serviceOptions struct {
	CommonOptions
	Bucket string
}

func (o *serviceOptions) AddFlags(fs *pflag.FlagSet) {
	o.CommonOptions.AddFlags(fs)
	fs.StringVar(&o.Bucket, "bucket", o.Bucket, "bucket to serve")
}

func (o *serviceOptions) Validate() error {
	var errs []error
	if o.Bucket == "" {
		errs = append(errs, errors.New("--bucket is required"))
	}
	return errors.Join(o.CommonOptions.Validate(), errors.Join(errs...))
}

func TestRunMainExitCodes(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		run        func(context.Context, *serviceOptions) error
		wantCode   int
		wantOutput []string
		wantRun    bool
	}{
		{
			name:       "--help prints the usage and exits 0 without running",
			args:       []string{"--help"},
			wantCode:   ExitOK,
			wantOutput: []string{"Usage of s3csi-test", "--admin-address", "--nats-url", "--kubeconfig", "--log-format", "--bucket"},
		},
		{
			name:       "an unknown flag exits 2 naming it",
			args:       []string{"--bucket=b", "--no-such-flag"},
			wantCode:   ExitUsage,
			wantOutput: []string{"s3csi-test: unknown flag: --no-such-flag", "Run s3csi-test --help for usage."},
		},
		{
			name:       "a malformed flag value exits 2",
			args:       []string{"--bucket=b", "--log-level=loud"},
			wantCode:   ExitUsage,
			wantOutput: []string{"--log-level"},
		},
		{
			name:       "invalid options exit 2 naming every flag to fix",
			args:       []string{"--admin-address=localhost", "--log-format=xml"},
			wantCode:   ExitUsage,
			wantOutput: []string{"s3csi-test: invalid options:", "--admin-address", "--log-format", "--bucket is required"},
		},
		{
			name:     "a run that ends without error exits 0",
			args:     []string{"--bucket=b"},
			run:      func(context.Context, *serviceOptions) error { return nil },
			wantCode: ExitOK,
			wantRun:  true,
		},
		{
			name:       "a failing run exits 1 and logs the error",
			args:       []string{"--bucket=b", "--log-format=text"},
			run:        func(context.Context, *serviceOptions) error { return errors.New("connect to S3: refused") },
			wantCode:   ExitFailure,
			wantOutput: []string{"Exiting on error", "connect to S3: refused"},
			wantRun:    true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NATS_URL", "")
			ran := false
			run := func(ctx context.Context, o *serviceOptions) error {
				ran = true
				if tt.run == nil {
					return fmt.Errorf("run called with %+v", o)
				}
				return tt.run(ctx, o)
			}
			var out bytes.Buffer
			opts := &serviceOptions{CommonOptions: NewCommonOptions(":8080")}
			code := runMain(t.Context(), "s3csi-test", tt.args, &out, opts, run)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d; output:\n%s", code, tt.wantCode, out.String())
			}
			if ran != tt.wantRun {
				t.Errorf("run called = %v, want %v", ran, tt.wantRun)
			}
			for _, want := range tt.wantOutput {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output does not contain %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestRunMainPassesParsedOptionsAndALogger(t *testing.T) {
	t.Setenv("NATS_URL", "nats://env:4222")
	var got serviceOptions
	var hasLogger bool
	opts := &serviceOptions{CommonOptions: NewCommonOptions(":8080")}
	code := runMain(t.Context(), "s3csi-test", []string{"--bucket=b", "--kubeconfig=/k"}, &bytes.Buffer{}, opts,
		func(ctx context.Context, o *serviceOptions) error {
			got = *o
			_, err := logr.FromContext(ctx)
			hasLogger = err == nil
			return nil
		})
	if code != ExitOK {
		t.Fatalf("exit code = %d, want 0", code)
	}
	if got.Bucket != "b" || got.Kubeconfig != "/k" || got.NATSURL != "nats://env:4222" || got.AdminAddr != ":8080" {
		t.Errorf("run got options %+v, want bucket b, kubeconfig /k, the NATS URL from the environment and the default admin address", got)
	}
	if !hasLogger {
		t.Error("run's context carries no logger")
	}
}

// TestMainExitsZeroAfterSIGTERM checks the rollout contract: SIGTERM cancels the service's context,
// and a service that then stops cleanly exits 0.
func TestMainExitsZeroAfterSIGTERM(t *testing.T) {
	t.Setenv("NATS_URL", "")
	args := os.Args
	os.Args = []string{"s3csi-test", "--bucket=b", "--admin-address=127.0.0.1:0"}
	t.Cleanup(func() { os.Args = args })

	opts := &serviceOptions{CommonOptions: NewCommonOptions(":8080")}
	code := Main("s3csi-test", opts, func(ctx context.Context, _ *serviceOptions) error {
		// The handler is installed before run is called, so the signal cannot kill the test.
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			return fmt.Errorf("send SIGTERM: %w", err)
		}
		<-ctx.Done()
		return nil
	})
	if code != ExitOK {
		t.Fatalf("exit code = %d, want 0", code)
	}
}
