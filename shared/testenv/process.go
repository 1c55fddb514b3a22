package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a service binary started by a test; Done is closed once it has exited.
type Process struct {
	Cmd    *exec.Cmd
	Done   chan struct{}
	output SyncBuffer
}

// BuildBinary builds the main package in the working directory into a temporary file, as its
// image builds it (GoBuild).
func BuildBinary(t testing.TB, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if err := GoBuild(t.Context(), ".", ".", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// GoBuild builds the main package pkg of the module in dir into out the way the images' binaries
// are built (the Makefile's IMAGE_GO and GO_NODWARF): on its module alone (GOWORK=off), static
// (CGO_ENABLED=0), with -trimpath and without DWARF. A test then runs the binary that ships, and
// the packages compiled for it are the ones the image builds, the e2e suite and lint reuse from
// the Go build cache, whatever flags the test itself was built with (-race needs cgo).
func GoBuild(ctx context.Context, dir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-gcflags=all=-dwarf=false", "-ldflags=-w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, b)
	}
	return nil
}

// StartProcess starts bin with args; the process is killed, if still running, when the test ends.
func StartProcess(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	// t.Context is canceled before cleanups run, which kills a binary that is still running.
	p := &Process{Cmd: exec.CommandContext(t.Context(), bin, args...), Done: make(chan struct{})}
	p.Cmd.Stdout = &p.output
	p.Cmd.Stderr = &p.output
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		_ = p.Cmd.Wait() // the exit status is read from ProcessState
		close(p.Done)
	}()
	t.Cleanup(func() { <-p.Done })
	return p
}

// Output is what the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.output.String() }

// AdminAddress reads the bound admin address from the "Serving admin endpoints" JSON log line,
// so tests listen on port 0 instead of guessing a free port.
func (p *Process) AdminAddress(t testing.TB) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		scanner := bufio.NewScanner(strings.NewReader(p.Output()))
		for scanner.Scan() {
			var line struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal(scanner.Bytes(), &line) == nil && line.Msg == "Serving admin endpoints" {
				return line.Address
			}
		}
		select {
		case <-p.Done:
			t.Fatalf("binary exited before serving; output:\n%s", p.Output())
		case <-deadline:
			t.Fatalf("no admin address logged within 30s; output:\n%s", p.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitHealthy polls url until it answers 200.
func WaitHealthy(t testing.TB, url string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s not 200 within 10s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StopsCleanlyOnSIGTERM sends SIGTERM and fails the test unless the process exits 0 within
// timeout, as a rollout needs it to.
func (p *Process) StopsCleanlyOnSIGTERM(t testing.TB, timeout time.Duration) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("send SIGTERM: %v", err)
	}
	select {
	case <-p.Done:
	case <-time.After(timeout):
		t.Fatalf("binary still running %s after SIGTERM; output:\n%s", timeout, p.Output())
	}
	if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code = %d, want 0; output:\n%s", code, p.Output())
	}
}

// StartHealthyBinary builds the main package in the working directory as name, starts it with
// args and waits until its /healthz answers. args must bind the admin endpoint to port 0
// (--admin-address=127.0.0.1:0): the address is read from the binary's log.
func StartHealthyBinary(t testing.TB, name string, args ...string) *Process {
	t.Helper()
	p := StartProcess(t, BuildBinary(t, name), args...)
	WaitHealthy(t, "http://"+p.AdminAddress(t)+"/healthz")
	return p
}

// RunToExit runs bin with args until it exits, with env added to the test's environment (a later
// KEY=value wins), and returns its exit code and everything it wrote to stdout and stderr.
func RunToExit(t testing.TB, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run %s: %v\n%s", bin, err, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// BuildModuleBinaryE builds the main package pkg of the repository's module moduleDir (a path
// relative to the repository root, e.g. "services/mounter") into out with GoBuild. Tests use it
// for another image's binary they must not import, such as the node-agent's tests for the
// mounter.
func BuildModuleBinaryE(ctx context.Context, moduleDir, pkg, out string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	return GoBuild(ctx, filepath.Join(root, moduleDir), pkg, out)
}
