package s3fs

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr/funcr"

	"github.com/s3csi/s3csi/shared/testenv"
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
