package mounter_test

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"

	"github.com/s3csi/s3csi/services/mounter/internal/fusetest"
	"github.com/s3csi/s3csi/services/mounter/internal/mounter"
)

// mounterEnv makes the test binary run the mounter side, serving the test filesystem, instead
// of the tests.
const mounterEnv = "S3CSI_TEST_HANDSHAKE_MOUNTER_COMM_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(mounterEnv); dir != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		code := mounter.Run(ctx, dir, fusetest.NewEngine(dir))
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// startMounterProcess runs the mounter side in a child process and returns its exit code.
//
// Problem: a process that serves a FUSE filesystem and also reads it can deadlock: a garbage
// collection stops the world while a thread waits in the kernel for a FUSE answer that only
// the stopped process can give (seen as a hung test under -race).
// Solution: the filesystem is served by another process, as in a Mountpoint Pod.
// Invariant: no test process reads a FUSE mount it serves itself.
func startMounterProcess(t *testing.T, commDir string) <-chan int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mounterEnv+"="+commDir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code, exited := make(chan int, 1), make(chan struct{})
	go func() {
		_ = cmd.Wait()
		code <- cmd.ProcessState.ExitCode()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return code
}
