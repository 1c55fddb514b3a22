package mounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/cabundle"
	"github.com/s3csi/s3csi/shared/handshake"
)

// mountS3FD is the descriptor number the FUSE connection has in the mount-s3 process: the first
// of exec.Cmd's ExtraFiles.
const mountS3FD = 3

// DefaultStartGrace is how long MountS3Engine watches a new mount-s3 process for an early exit.
const DefaultStartGrace = 2 * time.Second

// MountS3Engine serves mount requests with an operator-supplied mount-s3 binary instead of the
// built-in filesystem: the same options, on the same FUSE connection (as /dev/fd/3), with the
// profile files in the comm dir named in its environment.
//
// mount-s3 checks the bucket before it answers the kernel, and exits with its error if it cannot
// serve; nothing in the Mountpoint Pod can see the mount itself. So a process still running after
// StartGrace counts as serving: requests on the mount wait until mount-s3 answers the kernel,
// and a later failure ends the process, which Wait reports.
type MountS3Engine struct {
	// Path is the mount-s3 binary.
	Path string
	// CommDir is the comm emptyDir; request file names are relative to it.
	CommDir string
	// Log receives the process's start and end.
	Log logr.Logger
	// StartGrace is how long an early exit counts as a failed mount; zero means DefaultStartGrace.
	StartGrace time.Duration
}

// Mount implements Engine.
func (e *MountS3Engine) Mount(ctx context.Context, fd int, state *os.File, req *handshake.Request) (Mounted, error) {
	dev := os.NewFile(uintptr(fd), "/dev/fuse")
	defer func() { _ = dev.Close() }() // the child holds its own copy once started
	if state != nil {
		_ = state.Close() // mount-s3 keeps no state another server could resume from
	}
	if req.Resume {
		return nil, errors.New("mount-s3 cannot take over a connection another mounter served; the node-agent mounts the volume again")
	}
	opts, env, err := prepare(e.CommDir, mountS3FD, req)
	if err != nil {
		return nil, err
	}
	opts.Foreground = true
	if len(req.CaBundle) > 0 {
		path, err := writeCABundle(req.CaBundle)
		if err != nil {
			return nil, err
		}
		// mount-s3 1.23 and later read it (as --ca-bundle); earlier ones ignore the variable,
		// where --ca-bundle would stop them at start as an unknown option.
		env["AWS_CA_BUNDLE"] = path
	}
	if opts.MaxAttempts != nil {
		// Not a mount-s3 option: the Scality and AWS drivers hand it over as the SDK's variable.
		env["AWS_MAX_ATTEMPTS"] = strconv.Itoa(*opts.MaxAttempts)
		opts.MaxAttempts = nil
	}
	cmd := exec.Command(e.Path, opts.CommandLine()...) //nolint:gosec // the operator chose the binary
	cmd.Env = mergeEnv(os.Environ(), env)
	cmd.ExtraFiles = []*os.File{dev}
	// mount-s3 must not outlive the mounter that answers for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out := &tail{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = os.Stdout, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", e.Path, err)
	}
	e.Log.Info("Started mount-s3", "path", e.Path, "pid", cmd.Process.Pid, "bucket", req.Bucket)
	p := &mountS3Process{cmd: cmd, out: out, done: make(chan struct{})}
	go p.wait()
	grace := e.StartGrace
	if grace <= 0 {
		grace = DefaultStartGrace
	}
	select {
	case <-p.done:
		return nil, p.exitError()
	case <-time.After(grace):
		return p, nil
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("wait for mount-s3 to start: %w", ctx.Err())
	}
}

// mountS3Process is a running mount-s3.
type mountS3Process struct {
	cmd  *exec.Cmd
	out  *tail
	done chan struct{}
	err  error
}

func (p *mountS3Process) wait() {
	p.err = p.cmd.Wait()
	close(p.done)
}

// Wait blocks until mount-s3 exits: nil when it exited 0 (the filesystem was unmounted).
func (p *mountS3Process) Wait() error {
	<-p.done
	if p.err == nil {
		return nil
	}
	return p.exitError()
}

func (p *mountS3Process) exitError() error {
	out := p.out.String()
	// First: the node-agent shows the start of a long message only.
	if tlsUntrusted(out) {
		out = cabundle.Hint + ": " + out
	}
	if p.err == nil {
		return errors.New("mount-s3 exited before it served the mount: " + out)
	}
	return fmt.Errorf("mount-s3 %w: %s", p.err, out)
}

// mergeEnv returns base with the keys of set replaced, in a stable order.
func mergeEnv(base []string, set map[string]string) []string {
	out := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+set[k])
	}
	return out
}

// tail keeps the last max bytes written to it (mount-s3's error output) and copies everything
// to the mounter's own stderr, where kubectl logs shows it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	_, _ = os.Stderr.Write(b)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return "no output"
	}
	return s
}
