package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/testenv"
)

// TestBinaryStopsCleanlyOnSIGTERM runs the real binary the way the kubelet does: it must come up
// healthy and exit 0 promptly on SIGTERM, or a rollout would wait out the grace period.
func TestBinaryStopsCleanlyOnSIGTERM(t *testing.T) {
	s3 := testenv.StartS3(t)
	p := testenv.StartProcess(t, testenv.BuildBinary(t, binary),
		"--admin-address=127.0.0.1:0",
		"--csi-endpoint=unix://"+filepath.Join(t.TempDir(), "csi.sock"),
		"--s3-endpoint="+s3.Endpoint,
	)
	testenv.WaitHealthy(t, "http://"+p.AdminAddress(t)+"/healthz")
	p.StopsCleanlyOnSIGTERM(t, 5*time.Second)
}

// TestBinaryRefusesToStartWithoutAnS3Endpoint checks the operator gets the flag to set, not a
// failure on the first CreateVolume.
func TestBinaryRefusesToStartWithoutAnS3Endpoint(t *testing.T) {
	cmd := exec.Command(testenv.BuildBinary(t, binary), "--admin-address=127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit = %v, want code 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "--s3-endpoint") {
		t.Errorf("output does not name --s3-endpoint:\n%s", out)
	}
}
