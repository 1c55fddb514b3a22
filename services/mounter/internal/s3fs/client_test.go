package s3fs

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// TestFailedRequestsAreLoggedNotFoundIsNot: a request that still fails after the SDK's retries is
// logged with its operation, key and error (the operator's only clue behind an EIO); the "not
// found" answers of ordinary lookups and the credentials are not.
func TestFailedRequestsAreLoggedNotFoundIsNot(t *testing.T) {
	s := testenv.StartS3(t)
	opts := baseOptions(s)
	opts.EndpointURL = interceptEndpoint(t, s.Endpoint, func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/broken") {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	cfg := Config{Options: opts, Log: log, RequestTimeout: 10 * time.Second}
	client, err := newClient(t.Context(), &cfg.Options, credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	head := func(key string) error {
		_, err := client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
		return err
	}
	if err := head("missing"); toErrno(err) != syscall.ENOENT {
		t.Fatalf("HEAD of a missing key: %v, want not found", err)
	}
	if err := head("broken"); err == nil {
		t.Fatal("HEAD of a key the server answers with 503: no error")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1 (the 503, not the 404):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, want := range []string{`"msg"="S3 request failed"`, `"operation"="HeadObject"`, `"key"="broken"`, "503", `"elapsed"=`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line lacks %s: %s", want, lines[0])
		}
	}
	if strings.Contains(lines[0], s.SecretKey) {
		t.Errorf("log line holds the secret key: %s", lines[0])
	}
}

// TestAWSMaxAttemptsIsTheAttemptsOfEachRequest: --aws-max-attempts, which the Scality and AWS
// drivers give mount-s3 as AWS_MAX_ATTEMPTS, is the number of attempts of a request that keeps
// failing with a retryable error (DefaultMaxAttempts without it); with --debug each retry is
// logged.
func TestAWSMaxAttemptsIsTheAttemptsOfEachRequest(t *testing.T) {
	s := testenv.StartS3(t)
	var sent atomic.Int64
	endpoint := interceptEndpoint(t, s.Endpoint, func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/broken") {
			sent.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	for _, tc := range []struct {
		name     string
		attempts *int
		debug    bool
		want     int64
	}{
		{name: "by default", want: DefaultMaxAttempts},
		{name: "with aws-max-attempts 2 and debug", attempts: ptr(2), debug: true, want: 2},
		{name: "with aws-max-attempts 1", attempts: ptr(1), want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := baseOptions(s)
			opts.EndpointURL, opts.MaxAttempts, opts.Debug = endpoint, tc.attempts, tc.debug
			var mu sync.Mutex
			var lines []string
			log := funcr.New(func(_, args string) {
				mu.Lock()
				defer mu.Unlock()
				lines = append(lines, args)
			}, funcr.Options{})
			cfg := Config{Options: opts, Log: log, RequestTimeout: 20 * time.Second}
			client, err := newClient(t.Context(), &cfg.Options, credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""), &cfg)
			if err != nil {
				t.Fatal(err)
			}
			sent.Store(0)
			if _, err := client.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("broken")}); err == nil {
				t.Fatal("HEAD of a key the server answers with 503: no error")
			}
			if got := sent.Load(); got != tc.want {
				t.Fatalf("%d attempts, want %d", got, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			retries := 0
			for _, l := range lines {
				if strings.Contains(l, "retrying request") {
					retries++
				}
			}
			if want := map[bool]int{true: int(tc.want) - 1}[tc.debug]; retries != want {
				t.Fatalf("%d retries logged, want %d:\n%s", retries, want, strings.Join(lines, "\n"))
			}
		})
	}
}

// TestCABundleIsReadAndChecked: --ca-bundle (the command line's; the node-agent refuses it)
// is read, and a file that holds no certificate fails the mount instead of trusting nothing.
func TestCABundleIsReadAndChecked(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("no certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{name: "a missing file", path: filepath.Join(dir, "missing.pem"), want: "read --ca-bundle"},
		{name: "a file without a certificate", path: notPEM, want: "CA bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Options: mountargs.Options{Bucket: "bucket-1", CABundle: tc.path}, Log: logr.Discard()}
			_, err := newClient(t.Context(), &cfg.Options, nil, &cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("newClient with --ca-bundle %s = %v, want an error containing %q", tc.path, err, tc.want)
			}
		})
	}
}
