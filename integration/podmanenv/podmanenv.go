// Package podmanenv gives tests a Podman of their own: its configuration, image store and network
// definitions in a temporary directory, so that they never touch the host's containers, set up
// as Podman works on this kind of machine (cgroupfs, runc, and the ulimits without which every
// container fails). The container suite (integration/containers) serves its Docker API to
// testcontainers-go; the e2e suite runs `podman run` beside the cluster.
package podmanenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Env is one private Podman set-up. Its methods are safe for concurrent use.
type Env struct {
	// Dir holds containers.conf, storage.conf, the store and the network definitions.
	Dir string
	// Environ is the environment every podman command of this Env runs with.
	Environ []string
	bin     string
}

// New finds podman and writes a private configuration into a new temporary directory. It fails,
// saying how to install podman, when podman is missing.
func New() (*Env, error) {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, errors.New("podman not found: these tests run containers under Podman " +
			"(apt-get install -y podman; make podman-deps installs it)")
	}
	dir, err := os.MkdirTemp("", "s3csi-podman-")
	if err != nil {
		return nil, fmt.Errorf("create podman dir: %w", err)
	}
	files := map[string]string{
		// Without the ulimits every container fails here ("error setting rlimit type 6").
		"containers.conf": fmt.Sprintf(`[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"

[network]
network_backend = "netavark"
network_config_dir = %q
`, filepath.Join(dir, "networks")),
		"storage.conf": fmt.Sprintf(`[storage]
driver = "overlay"
runroot = %q
graphroot = %q
`, filepath.Join(dir, "run"), filepath.Join(dir, "storage")),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("write podman %s: %w", name, err)
		}
	}
	return &Env{
		Dir: dir,
		Environ: append(os.Environ(),
			"CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
			"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf")),
		bin: bin,
	}, nil
}

// Command is a podman command of this Env, not started.
func (e *Env) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = e.Environ
	return cmd
}

// Run runs a podman command of this Env, for up to two minutes, and returns its combined output.
func (e *Env) Run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := e.Command(ctx, args...).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("podman %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), err
}

// Load loads an image tarball (docker-archive, as `make images` writes them) into the store.
func (e *Env) Load(tarball string) error {
	if out, err := e.Run("load", "-q", "-i", tarball); err != nil {
		return fmt.Errorf("load %s: %w\n%s", tarball, err, out)
	}
	return nil
}

// Close removes every container, network and image this Env made, unmounts its store and
// removes its directory. Stop a `podman system service` of this Env first.
func (e *Env) Close() error {
	_, _ = e.Run("rm", "--all", "--force", "--time=0")
	_, _ = e.Run("network", "prune", "--force")
	var errs []error
	// Unmounts the store's overlay mounts and removes it.
	if out, err := e.Run("system", "reset", "--force"); err != nil {
		errs = append(errs, fmt.Errorf("%w\n%s", err, out))
	}
	if err := os.RemoveAll(e.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove podman dir: %w", err))
	}
	return errors.Join(errs...)
}
