package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/testenv"
)

// TestLocalStack runs the local stack as `make run` does and uses each component it announces
// with the values from its env file.
func TestLocalStack(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, pw)
		_ = pw.Close()
	}()

	envFile := ""
	lines := bufio.NewScanner(pr)
	for envFile == "" && lines.Scan() {
		if m := regexp.MustCompile(`source (\S+)`).FindStringSubmatch(lines.Text()); m != nil {
			envFile = m[1]
		}
	}
	if envFile == "" {
		cancel()
		t.Fatalf("the stack never said how to load it: %v", <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	env := readEnv(t, envFile)
	if info, err := os.Stat(envFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("env file mode = %v (%v), want 0600: it holds credentials", info.Mode().Perm(), err)
	}

	t.Run("the API server answers with the kubeconfig and serves the CRD", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", env["KUBECONFIG"])
		if err != nil {
			t.Fatal(err)
		}
		scheme, err := testenv.NewScheme()
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.List(ctx, &s3csiv2.MountpointS3PodAttachmentList{}); err != nil {
			t.Fatalf("list s3pa: %v", err)
		}
	})

	t.Run("NATS has the events stream", func(t *testing.T) {
		nc, err := nats.Connect(env["NATS_URL"])
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Stream(ctx, events.StreamName); err != nil {
			t.Fatalf("stream %s: %v", events.StreamName, err)
		}
	})

	t.Run("S3 accepts the credentials and has the bucket", func(t *testing.T) {
		c := s3.New(s3.Options{
			BaseEndpoint: aws.String(env["AWS_ENDPOINT_URL"]),
			Region:       env["AWS_REGION"],
			Credentials:  credentials.NewStaticCredentialsProvider(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], ""),
			UsePathStyle: true,
		})
		if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(env["S3CSI_BUCKET"])}); err != nil {
			t.Fatalf("head bucket: %v", err)
		}
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after interrupt, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stack did not stop within 30s of the interrupt")
	}
	if _, err := os.Stat(envFile); !os.IsNotExist(err) {
		t.Errorf("state left behind after stop: %s (%v)", envFile, err)
	}
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			t.Fatalf("env file line %q is not export K=V", line)
		}
		env[k] = v
	}
	for _, k := range []string{"KUBECONFIG", "NATS_URL", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "S3CSI_BUCKET"} {
		if env[k] == "" {
			t.Errorf("env file has no %s", k)
		}
	}
	return env
}
