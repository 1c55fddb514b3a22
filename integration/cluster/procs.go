package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A daemon is one process of the cluster. It is started in its own session so it outlives the
// command that started it, its output goes to <state>/logs/<name>.log, and its PID to
// <run>/pids/<name>.pid with the executable's path, so Down stops exactly what Up started and
// never a process that reused the PID.
type daemon struct {
	name string
	path string
	args []string
	env  []string
}

func (c Config) start(d daemon) error {
	if err := os.MkdirAll(c.logDir(), 0o755); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	if err := os.MkdirAll(c.pidDir(), 0o755); err != nil {
		return fmt.Errorf("create pid dir: %w", err)
	}
	if pid, ok := c.running(d.name); ok {
		return fmt.Errorf("start %s: already running as PID %d", d.name, pid)
	}
	log, err := os.OpenFile(c.LogFile(d.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s log: %w", d.name, err)
	}
	defer log.Close()
	fmt.Fprintf(log, "\n==== %s %s %s\n", time.Now().Format(time.RFC3339), d.path, strings.Join(d.args, " "))
	cmd := exec.Command(d.path, d.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), d.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.name, err)
	}
	pidFile := fmt.Sprintf("%d\n%s\n", cmd.Process.Pid, d.path)
	if err := os.WriteFile(filepath.Join(c.pidDir(), d.name+".pid"), []byte(pidFile), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("write %s pid file: %w", d.name, err)
	}
	// Reap it if it dies while this process still runs, so running() sees it gone.
	go func() { _ = cmd.Wait() }()
	return nil
}

// running reports whether the daemon's recorded process is alive and still runs its executable.
func (c Config) running(name string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(c.pidDir(), name+".pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		return 0, false
	}
	pid, err := strconv.Atoi(lines[0])
	if err != nil || pid <= 1 {
		return 0, false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || strings.TrimSuffix(exe, " (deleted)") != lines[1] {
		return 0, false
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// A zombie has exited: only its parent's wait is missing.
		if f := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:]); len(f) > 0 && string(f[0]) == "Z" {
			return 0, false
		}
	}
	return pid, true
}

// stop sends SIGTERM, waits up to grace, then SIGKILL, and removes the pid file.
func (c Config) stop(name string, grace time.Duration) error {
	defer os.Remove(filepath.Join(c.pidDir(), name+".pid"))
	pid, ok := c.running(name)
	if !ok {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if _, ok := c.running(name); !ok {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	for range 50 {
		if _, ok := c.running(name); !ok {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("stop %s: PID %d survives SIGKILL", name, pid)
}

// tail returns the last lines of a component's log, for error messages.
func (c Config) tail(name string, n int) string {
	b, err := os.ReadFile(c.LogFile(name))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// run runs a command to completion and returns its combined output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
