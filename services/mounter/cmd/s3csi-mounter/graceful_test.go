package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/app"
)

// TestPodMounterServesOnAfterSIGTERM deletes a Mountpoint Pod the way kubelet does while a
// workload reads its bucket: the binary gets SIGTERM, and the reader keeps reading (a file it
// holds open, and an object written after the signal, so S3 requests still go out) until the
// node-agent asks for the exit and unmounts; the pod then exits 0. Both engines.
func TestPodMounterServesOnAfterSIGTERM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	s := testenv.StartS3(t)
	bin := buildWorldExecutable(t)
	for _, engine := range []string{"built-in", app.EngineMountS3} {
		t.Run(engine, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			put := func(key, body string) {
				t.Helper()
				if _, err := s.RootClient().PutObject(ctx, &s3.PutObjectInput{
					Bucket: aws.String(s.Bucket), Key: aws.String(key), Body: stringsReader(body),
				}); err != nil {
					t.Fatal(err)
				}
			}
			put("before.txt", "written before the signal")
			dir := t.TempDir()
			script := ""
			if engine == app.EngineMountS3 {
				script = filepath.Join(dir, "mount-s3")
				// The stand-in must not follow the engine switch itself, or it would start itself forever.
				text := fmt.Sprintf("#!/bin/sh\nunset %s\nexec %s \"$@\"\n", app.EngineEnv, bin)
				if err := os.WriteFile(script, []byte(text), 0o755); err != nil { //nolint:gosec // a test script
					t.Fatal(err)
				}
			}
			pod := startPodMounter(t, bin, script)
			source := filepath.Join(dir, "source")
			if err := pod.mount(ctx, t, source, pod.bucketRequest(t, s, "--force-path-style", "--allow-root")); err != nil {
				t.Fatalf("mount request: %v; output:\n%s", err, pod.output.String())
			}
			reader, err := os.Open(filepath.Join(source, "before.txt"))
			if err != nil {
				t.Fatalf("open through the mount: %v; output:\n%s", err, pod.output.String())
			}
			defer func() { _ = reader.Close() }()

			if err := pod.proc.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 15*time.Second, "the log line of a mounter that keeps serving", func() bool {
				select {
				case <-pod.exited:
					t.Fatalf("the mounter exited on SIGTERM while a reader used its mount; output:\n%s", pod.output.String())
				default:
				}
				return strings.Contains(pod.output.String(), "keeps serving until")
			})
			put("after.txt", "written after the signal")
			b, err := io.ReadAll(io.NewSectionReader(reader, 0, 1<<20))
			if err != nil || string(b) != "written before the signal" {
				t.Fatalf("read through the open file after SIGTERM = %q, %v; output:\n%s", b, err, pod.output.String())
			}
			_ = reader.Close()
			if b, err := os.ReadFile(filepath.Join(source, "after.txt")); err != nil || string(b) != "written after the signal" {
				t.Fatalf("read a new object after SIGTERM = %q, %v; output:\n%s", b, err, pod.output.String())
			}

			if err := os.WriteFile(filepath.Join(pod.commDir, mppod.MountExitName), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Unmount(source, 0); err != nil {
				t.Fatal(err)
			}
			if code := pod.exitCode(t); code != 0 {
				t.Fatalf("exit status %d after the exit request and unmount, want 0; output:\n%s", code, pod.output.String())
			}
		})
	}
}
