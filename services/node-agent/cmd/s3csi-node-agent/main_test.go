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
	api := testenv.StartAPIServer(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	// Short dirs: unix socket paths hold at most 107 bytes.
	dir, err := os.MkdirTemp("", "na")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := testenv.StartProcess(t, testenv.BuildBinary(t, binary), "--admin-address=127.0.0.1:0", "--node-name=node-a",
		"--kubeconfig="+kubeconfig, "--kubelet-dir="+dir, "--csi-endpoint=unix://"+filepath.Join(dir, "csi.sock"), "--nats-url=")
	testenv.WaitHealthy(t, "http://"+p.AdminAddress(t)+"/healthz")
	p.StopsCleanlyOnSIGTERM(t, 5*time.Second)
}

// TestBinaryFailsFastWithoutNodeName guards the DaemonSet contract: without NODE_NAME the agent
// cannot tell its pods from others', so it must refuse to start and say what to set.
func TestBinaryFailsFastWithoutNodeName(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), testenv.BuildBinary(t, binary), "--admin-address=127.0.0.1:0")
	cmd.Env = append(os.Environ(), "NODE_NAME=")
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 {
		t.Fatalf("run without a node name: %v, want exit code 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "--node-name is required") {
		t.Errorf("output does not say --node-name is required:\n%s", out)
	}
}
