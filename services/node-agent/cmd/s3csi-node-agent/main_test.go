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
	kubeconfig := testenv.StartAPIServer(t).KubeconfigFile(t)
	// Short dirs: unix socket paths hold at most 107 bytes.
	dir, err := os.MkdirTemp("", "na")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := testenv.StartHealthyBinary(t, binary, "--admin-address=127.0.0.1:0", "--node-name=node-a", "--kubeconfig="+kubeconfig,
		"--kubelet-dir="+dir, "--csi-endpoint=unix://"+filepath.Join(dir, "csi.sock"), "--nats-url=")
	p.StopsCleanlyOnSIGTERM(t, 5*time.Second)
}

// TestBinaryFailsFastWithoutNodeName guards the DaemonSet contract: without NODE_NAME the agent
// cannot tell its pods from others', so it must refuse to start and say what to set.
func TestBinaryFailsFastWithoutNodeName(t *testing.T) {
	code, out := testenv.RunToExit(t, testenv.BuildBinary(t, binary), []string{"NODE_NAME="}, "--admin-address=127.0.0.1:0")
	if code != 2 || !strings.Contains(out, "--node-name is required") {
		t.Errorf("exit code = %d, want 2 with output saying --node-name is required:\n%s", code, out)
	}
}
