package mounter_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/fusetest"
	"github.com/s3csi/s3csi/services/mounter/internal/mounter"
)

// mounterEnv makes the test binary run the mounter side, serving the test filesystem, instead
// of the tests.
const mounterEnv = "S3CSI_TEST_HANDSHAKE_MOUNTER_COMM_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(mounterEnv); dir != "" {
		log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
		ctx, stopRequested, release := mounter.NotifySignals(logr.NewContext(context.Background(), log))
		code := mounter.Run(ctx, dir, fusetest.NewEngine(dir), stopRequested)
		release()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// mounterProcess is the mounter side running in a child process.
type mounterProcess struct {
	cmd    *exec.Cmd
	code   chan int
	output *testenv.SyncBuffer
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
	return startMounterChild(t, commDir).code
}

// startMounterChild is startMounterProcess with access to the process and its output.
func startMounterChild(t *testing.T, commDir string) *mounterProcess {
	t.Helper()
	p := &mounterProcess{cmd: exec.Command(os.Args[0], "-test.run=^$"), code: make(chan int, 1), output: &testenv.SyncBuffer{}}
	p.cmd.Env = append(os.Environ(), mounterEnv+"="+commDir)
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		p.code <- p.cmd.ProcessState.ExitCode()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("mounter output:\n%s", p.output.String())
		}
	})
	return p
}
