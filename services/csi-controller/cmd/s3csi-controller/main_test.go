package main

import (
	"os"
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
	keys := t.TempDir()
	if err := os.WriteFile(filepath.Join(keys, "key"), []byte(strings.Repeat("k", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testenv.StartHealthyBinary(t, binary, "--admin-address=127.0.0.1:0",
		"--csi-endpoint=unix://"+filepath.Join(t.TempDir(), "csi.sock"), "--s3-endpoint="+s3.Endpoint, "--ownership-keys-dir="+keys)
	p.StopsCleanlyOnSIGTERM(t, 5*time.Second)
}

// TestBinaryRefusesToStartWithoutAnS3Endpoint checks the operator gets the flag to set, not a
// failure on the first CreateVolume.
func TestBinaryRefusesToStartWithoutAnS3Endpoint(t *testing.T) {
	code, out := testenv.RunToExit(t, testenv.BuildBinary(t, binary), []string{"AWS_ENDPOINT_URL="}, "--admin-address=127.0.0.1:0")
	if code != 2 || !strings.Contains(out, "--s3-endpoint") {
		t.Errorf("exit code = %d, want 2 with output naming --s3-endpoint:\n%s", code, out)
	}
}
