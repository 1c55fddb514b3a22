//go:build containers

package containers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/s3csi/s3csi/shared/testenv"
)

// Images, by service, as `make images` names them. Set by TestMain.
var images = map[string]string{}

// The Podman this package starts: its environment (private configuration and store) for the
// podman commands the tests run beside testcontainers-go (networks, image loads).
var podmanEnv []string

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return 0, err
	}
	version, err := chartAppVersion(root)
	if err != nil {
		return 0, err
	}
	stop, err := startPodman()
	if err != nil {
		return 0, err
	}
	defer stop()
	for _, name := range []string{"controller", "pod-reconciler", "node-agent", "janitor", "mounter", "nats"} {
		tarball := filepath.Join(root, "bin", "images", fmt.Sprintf("s3csi-%s-%s.tar", name, version))
		if _, err := os.Stat(tarball); err != nil {
			return 0, fmt.Errorf("image of %s: %w (make images builds it)", name, err)
		}
		if out, err := podman("load", "-q", "-i", tarball); err != nil {
			return 0, fmt.Errorf("load %s: %w\n%s", tarball, err, out)
		}
		images[name] = fmt.Sprintf("docker.io/s3csi/%s:%s", name, version)
	}
	return m.Run(), nil
}

// chartAppVersion is the chart's appVersion, the tag `make images` gives the images.
func chartAppVersion(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "charts", "s3csi", "Chart.yaml"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^appVersion: "([^"]+)"`).FindSubmatch(b)
	if m == nil {
		return "", errors.New("charts/s3csi/Chart.yaml has no appVersion")
	}
	return string(m[1]), nil
}

// startPodman starts `podman system service` on a private socket, with its own configuration,
// store and network definitions in a temporary directory, and points testcontainers-go at it.
// The returned func removes every container, network and image it made.
func startPodman() (func(), error) {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, errors.New("podman not found: these tests run the services as containers under Podman's Docker API " +
			"(apt-get install -y podman; make test-containers installs it)")
	}
	dir, err := os.MkdirTemp("", "s3csi-podman-")
	if err != nil {
		return nil, err
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
			return nil, err
		}
	}
	podmanEnv = append(os.Environ(),
		"CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"))
	socket := filepath.Join(dir, "podman.sock")
	logFile, err := os.Create(filepath.Join(dir, "service.log"))
	if err != nil {
		return nil, err
	}
	service := exec.Command(bin, "system", "service", "--time=0", "unix://"+socket)
	service.Env, service.Stdout, service.Stderr = podmanEnv, logFile, logFile
	if err := service.Start(); err != nil {
		return nil, fmt.Errorf("start podman system service: %w", err)
	}
	stop := func() {
		_, _ = podman("rm", "--all", "--force", "--time=0")
		_, _ = podman("network", "prune", "--force")
		_ = service.Process.Kill()
		_ = service.Wait()
		// Unmounts the store's overlay mounts and removes it.
		if out, err := podman("system", "reset", "--force"); err != nil {
			fmt.Fprintf(os.Stderr, "podman system reset: %v\n%s\n", err, out)
		}
		_ = logFile.Close()
		_ = os.RemoveAll(dir)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.Dial("unix", socket)
		if err == nil {
			_ = conn.Close()
			break
		}
		if time.Now().After(deadline) {
			stop()
			b, _ := os.ReadFile(logFile.Name())
			return nil, fmt.Errorf("podman system service not answering on %s: %w\n%s", socket, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for k, v := range map[string]string{
		"DOCKER_HOST":                  "unix://" + socket,
		"TESTCONTAINERS_RYUK_DISABLED": "true",
		// Without it testcontainers-go takes this machine's /.dockerenv for a sign that it runs
		// in a container and looks for the daemon's host elsewhere.
		"TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
	} {
		if err := os.Setenv(k, v); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// podman runs a podman command against the package's private store.
func podman(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Env = podmanEnv
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
