package s3fs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/cabundle"
	"github.com/s3csi/s3csi/shared/testenv"
)

// An endpoint whose certificate a private CA signed is mounted when the mount is given that
// CA, and refused without it with an error that names the chart value to set.
func TestMountTrustsTheGivenCAAndExplainsAnUntrustedEndpoint(t *testing.T) {
	requireFUSE(t)
	s := testenv.StartS3TLS(t)
	other := testenv.StartS3TLS(t) // another CA: the wrong one
	for name, tt := range map[string]struct {
		ca   []byte
		want string
	}{
		"with the endpoint's CA the mount serves":                     {ca: s.CAPEM},
		"without a CA the mount is refused naming the chart value":    {want: cabundle.Hint},
		"with another CA the mount is refused naming the chart value": {ca: other.CAPEM, want: cabundle.Hint},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m, err := Mount(ctx, dir, Config{
				Options:        baseOptions(s),
				Credentials:    credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
				Log:            logr.Discard(),
				RequestTimeout: 10 * time.Second,
				CABundle:       tt.ca,
			})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("mount: %v", err)
				}
				defer unmountFS(t, dir, m)
				if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("hi"), 0o600); err != nil {
					t.Fatalf("write through the mount: %v", err)
				}
				return
			}
			if err == nil {
				unmountFS(t, dir, m)
				t.Fatal("mount succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "s3.caBundle") {
				t.Errorf("mount error = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}
