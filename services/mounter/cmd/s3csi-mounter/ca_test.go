package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3csi/s3csi/shared/cabundle"
	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/app"
)

// TestTheMountRequestsCABundleIsTrustedByEveryEngine plays the node-agent against Mountpoint
// Pods of both engines, with an S3 endpoint whose certificate a private CA signed: given that
// CA in the mount request the bucket is served, without it the mount fails with an error that
// says the certificate is not trusted and names the chart value to set.
func TestTheMountRequestsCABundleIsTrustedByEveryEngine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	s := testenv.StartS3TLS(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := s.RootClient().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("hello.txt"), Body: stringsReader("over HTTPS"),
	}); err != nil {
		t.Fatal(err)
	}
	bin := buildWorldExecutable(t)
	// The mount-s3 stand-in: this mounter's command-line mode, which reads AWS_CA_BUNDLE as
	// mount-s3 1.23 does; the script records the variable.
	dir := t.TempDir()
	caRecord := filepath.Join(dir, "aws-ca-bundle")
	script := filepath.Join(dir, "mount-s3")
	scriptText := fmt.Sprintf("#!/bin/sh\nunset %s\necho \"$AWS_CA_BUNDLE\" > %s\nexec %s \"$@\"\n", app.EngineEnv, caRecord, bin)
	if err := os.WriteFile(script, []byte(scriptText), 0o755); err != nil { //nolint:gosec // a test script
		t.Fatal(err)
	}
	for _, engine := range []struct{ name, script string }{{"the built-in engine", ""}, {"the mount-s3 engine", script}} {
		t.Run(engine.name+" serves the bucket with the CA", func(t *testing.T) {
			pod := startPodMounter(t, bin, engine.script)
			req := pod.bucketRequest(t, s, "--force-path-style")
			req.CaBundle = s.CAPEM
			source := filepath.Join(t.TempDir(), "source")
			if err := pod.mount(ctx, t, source, req); err != nil {
				t.Fatalf("mount request: %v; mounter output:\n%s", err, pod.output.String())
			}
			got, err := os.ReadFile(filepath.Join(source, "hello.txt"))
			if err != nil || string(got) != "over HTTPS" {
				t.Fatalf("read through the mount = %q, %v; output:\n%s", got, err, pod.output.String())
			}
			if engine.script == "" {
				return
			}
			path, err := os.ReadFile(caRecord)
			if err != nil {
				t.Fatal(err)
			}
			p := strings.TrimSpace(string(path))
			if p == "" || strings.HasPrefix(p, pod.commDir) {
				t.Fatalf("mount-s3 ran with AWS_CA_BUNDLE=%q, want a file of the mounter's own temporary dir", p)
			}
		})
		t.Run(engine.name+" refuses the mount without the CA, naming the chart value", func(t *testing.T) {
			pod := startPodMounter(t, bin, engine.script)
			err := pod.mount(ctx, t, filepath.Join(t.TempDir(), "source"), pod.bucketRequest(t, s, "--force-path-style"))
			var merr *handshake.MounterError
			if !errors.As(err, &merr) {
				t.Fatalf("mount request error = %v, want the mounter's error", err)
			}
			for _, want := range []string{"not trusted", cabundle.ChartValue} {
				if !strings.Contains(merr.Message, want) {
					t.Errorf("the mounter's error %q does not say %q", merr.Message, want)
				}
			}
		})
	}
}
