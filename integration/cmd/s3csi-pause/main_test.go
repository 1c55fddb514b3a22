package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/testenv"
)

// TestReapCollectsExitedChildren starts children that exit at once, leaves them unwaited (zombies)
// and checks that reap removes every one of them from the process table.
func TestReapCollectsExitedChildren(t *testing.T) {
	var pids []int
	for range 3 {
		cmd := exec.Command("/bin/true")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start child: %v", err)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	for _, pid := range pids {
		waitFor(t, func() bool { return procState(pid) == "Z" }, "child %d to become a zombie", pid)
	}
	reap()
	for _, pid := range pids {
		if st := procState(pid); st != "" {
			t.Errorf("child %d still in the process table in state %q after reap", pid, st)
		}
	}
}

// TestExitsZeroOnTermination runs the built program and checks it keeps running until SIGTERM or
// SIGINT, then exits 0.
func TestExitsZeroOnTermination(t *testing.T) {
	bin := testenv.BuildBinary(t, "s3csi-pause")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			if err := cmd.Start(); err != nil {
				t.Fatalf("start: %v", err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				t.Fatalf("exited before a signal: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatalf("signal: %v", err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("exit after %v: %v, want status 0", sig, err)
				}
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("still running 10 s after %v", sig)
			}
		})
	}
}

func TestRefusesArguments(t *testing.T) {
	bin := testenv.BuildBinary(t, "s3csi-pause")
	err := exec.Command(bin, "extra").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("run with an argument: %v, want exit status 2", err)
	}
}

// procState returns the state letter of pid from /proc, or "" when pid does not exist.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
