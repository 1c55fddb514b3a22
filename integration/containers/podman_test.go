//go:build containers

package containers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/integration/podmanenv"
)

// Images, by service, as `make images` names them. Set by TestMain.
var images = map[string]string{}

// The Podman this package starts (private configuration and store), for the podman commands the
// tests run beside testcontainers-go (networks, image loads).
var pm *podmanenv.Env

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
		if err := pm.Load(tarball); err != nil {
			return 0, err
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

// startPodman starts `podman system service` of a private Podman (podmanenv) on a socket of its
// own and points testcontainers-go at it. The returned func removes every container, network and
// image it made.
func startPodman() (func(), error) {
	env, err := podmanenv.New()
	if err != nil {
		return nil, err
	}
	pm = env
	socket := filepath.Join(pm.Dir, "podman.sock")
	logFile, err := os.Create(filepath.Join(pm.Dir, "service.log"))
	if err != nil {
		_ = pm.Close()
		return nil, err
	}
	service := pm.Command(context.Background(), "system", "service", "--time=0", "unix://"+socket)
	service.Stdout, service.Stderr = logFile, logFile
	if err := service.Start(); err != nil {
		_ = logFile.Close()
		_ = pm.Close()
		return nil, fmt.Errorf("start podman system service: %w", err)
	}
	stop := func() {
		_ = service.Process.Kill()
		_ = service.Wait()
		_ = logFile.Close()
		if err := pm.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "remove the tests' podman: %v\n", err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.Dial("unix", socket)
		if err == nil {
			_ = conn.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logFile.Name())
			stop()
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
func podman(args ...string) (string, error) { return pm.Run(args...) }
