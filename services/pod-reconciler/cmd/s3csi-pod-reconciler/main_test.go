package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/testenv"
)

// TestBinaryStopsCleanlyOnSIGTERM runs the real binary the way the kubelet does: it must come up
// healthy and exit 0 promptly on SIGTERM (releasing its Lease), or a rollout would wait out the
// grace period.
func TestBinaryStopsCleanlyOnSIGTERM(t *testing.T) {
	api := testenv.StartAPIServer(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	p := testenv.StartProcess(t, testenv.BuildBinary(t, binary), "--admin-address=127.0.0.1:0",
		"--kubeconfig="+kubeconfig, "--leader-election-namespace=default")
	testenv.WaitHealthy(t, "http://"+p.AdminAddress(t)+"/healthz")
	p.StopsCleanlyOnSIGTERM(t, 5*time.Second)
}
