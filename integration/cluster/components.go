package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

func (c Config) pkiFile(name string) string { return filepath.Join(c.pkiDir(), name) }

func (c Config) startEtcd() error {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.EtcdClientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.EtcdPeerPort)
	return c.start(daemon{name: "etcd", path: c.bin("etcd"), args: []string{
		"--name=s3csi", "--data-dir=" + filepath.Join(c.StateDir, "etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=s3csi=" + peer, "--listen-metrics-urls=", "--log-level=warn",
		// A test cluster's etcd: losing its data on a host crash is acceptable, waiting for
		// fsync on every write is not.
		"--unsafe-no-fsync",
	}})
}

func (c Config) startAPIServer() error {
	return c.start(daemon{name: "kube-apiserver", path: c.bin("kube-apiserver"), args: []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.EtcdClientPort),
		fmt.Sprintf("--secure-port=%d", c.APIServerPort),
		// The node's address, where pods reach the API server behind the kubernetes Service.
		"--advertise-address=" + c.NodeIP().String(),
		"--service-cluster-ip-range=" + c.ServiceRange.String(),
		"--tls-cert-file=" + c.pkiFile("apiserver.crt"), "--tls-private-key-file=" + c.pkiFile("apiserver.key"),
		"--client-ca-file=" + c.pkiFile("ca.crt"),
		"--kubelet-client-certificate=" + c.pkiFile("admin.crt"), "--kubelet-client-key=" + c.pkiFile("admin.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-key-file=" + c.pkiFile("sa.pub"),
		"--service-account-signing-key-file=" + c.pkiFile("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--profiling=false",
	}})
}

func (c Config) startControllerManager() error {
	kc := c.Kubeconfig()
	return c.start(daemon{name: "kube-controller-manager", path: c.bin("kube-controller-manager"), args: []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--leader-elect=false",
		"--service-account-private-key-file=" + c.pkiFile("sa.key"),
		"--root-ca-file=" + c.pkiFile("ca.crt"),
		"--cluster-signing-cert-file=" + c.pkiFile("ca.crt"), "--cluster-signing-key-file=" + c.pkiFile("ca.key"),
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range=" + c.ServiceRange.String(),
		"--profiling=false",
	}})
}

func (c Config) startScheduler() error {
	kc := c.Kubeconfig()
	return c.start(daemon{name: "kube-scheduler", path: c.bin("kube-scheduler"), args: []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false",
	}})
}

func (c Config) startContainerd() error {
	if err := os.MkdirAll(filepath.Dir(c.ContainerdSocket()), 0o711); err != nil {
		return fmt.Errorf("create containerd run dir: %w", err)
	}
	// A socket left by a containerd that did not stop cleanly would pass for the new one's.
	if err := os.Remove(c.ContainerdSocket()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale containerd socket: %w", err)
	}
	path, err := exec.LookPath("containerd")
	if err != nil {
		return fmt.Errorf("find containerd: %w", err)
	}
	return c.start(daemon{name: "containerd", path: path, args: []string{
		"--config=" + filepath.Join(c.confDir(), "containerd.toml"),
	}})
}

func (c Config) startKubelet() error {
	if err := os.MkdirAll(c.KubeletDir, 0o750); err != nil {
		return fmt.Errorf("create kubelet dir: %w", err)
	}
	return c.start(daemon{name: "kubelet", path: c.bin("kubelet"), args: []string{
		"--config=" + filepath.Join(c.confDir(), "kubelet.yaml"),
		"--kubeconfig=" + c.Kubeconfig(),
		"--root-dir=" + c.KubeletDir,
		"--hostname-override=" + c.NodeName,
		"--node-ip=" + c.NodeIP().String(),
		"--v=1",
	}})
}

func (c Config) startKubeProxy() error {
	return c.start(daemon{name: "kube-proxy", path: c.bin("kube-proxy"), args: []string{
		"--config=" + filepath.Join(c.confDir(), "kube-proxy.yaml"),
	}})
}

func (c Config) startVersitygw() error {
	gw := filepath.Join(c.RepoRoot, "bin", "versitygw")
	if _, err := os.Stat(gw); err != nil {
		return fmt.Errorf("versitygw is not built: run `make tools-test` (%w)", err)
	}
	if err := os.MkdirAll(c.S3DataDir(), 0o755); err != nil {
		return fmt.Errorf("create S3 data dir: %w", err)
	}
	if err := os.MkdirAll(c.s3IAMDir(), 0o700); err != nil {
		return fmt.Errorf("create S3 IAM dir: %w", err)
	}
	if err := c.s3PKI(); err != nil {
		return err
	}
	// The keys travel in the environment: the command line is logged, and shows in ps. The IAM
	// store holds the users tests add (S3User); without its cache a deleted user's key is refused
	// at once, as a revoked key is.
	return c.start(daemon{name: "versitygw", path: gw, args: []string{
		"--port", fmt.Sprintf("%s:%d", c.NodeIP(), c.S3Port), "--quiet",
		"--cert", filepath.Join(c.pkiDir(), "s3.crt"), "--key", filepath.Join(c.pkiDir(), "s3.key"),
		"--iam-dir", c.s3IAMDir(), "--iam-cache-disable", "posix", c.S3DataDir(),
	}, env: []string{"AWS_CA_BUNDLE=", "ROOT_ACCESS_KEY_ID=" + c.S3AccessKey, "ROOT_SECRET_ACCESS_KEY=" + c.S3SecretKey}})
}

func (c Config) startCoreDNS() error {
	var out strings.Builder
	if err := c.Kubectl(context.Background(), &out, &out, "apply", "-f", filepath.Join(c.confDir(), "coredns.yaml")); err != nil {
		return fmt.Errorf("%w: %s", err, out.String())
	}
	return nil
}

// ImageDir is where `make images` writes the image tarballs.
func (c Config) ImageDir() string { return filepath.Join(c.RepoRoot, "bin", "images") }

// LoadImages imports the cluster's own image tarballs of `make images` (pause, CoreDNS, the test
// images) into the cluster's containerd, skipping a tarball already imported with the same
// content. The product's images are not imported: the cluster pulls them from its registry
// (Push), each s3csi-<image>-<tag>.tar having a release layout <image> beside.
func (c Config) LoadImages(logf func(string, ...any)) error {
	all, err := filepath.Glob(filepath.Join(c.ImageDir(), "*.tar"))
	if err != nil {
		return fmt.Errorf("list images: %w", err)
	}
	layouts, err := c.releaseLayouts()
	if err != nil {
		return err
	}
	var tars []string
	for _, tar := range all {
		product := false
		for _, l := range layouts {
			product = product || strings.HasPrefix(filepath.Base(tar), "s3csi-"+filepath.Base(l)+"-")
		}
		if !product {
			tars = append(tars, tar)
		}
	}
	if len(tars) == 0 {
		return fmt.Errorf("no image tarballs in %s: run `make images`", c.ImageDir())
	}
	sort.Strings(tars)
	seen := filepath.Join(c.StateDir, "images")
	if err := os.MkdirAll(seen, 0o755); err != nil {
		return fmt.Errorf("create image record dir: %w", err)
	}
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return fmt.Errorf("find ctr (Debian package containerd): %w", err)
	}
	n := 0
	for _, tar := range tars {
		sum, err := fileSHA256(tar)
		if err != nil {
			return err
		}
		record := filepath.Join(seen, filepath.Base(tar)+".sha256")
		if old, err := os.ReadFile(record); err == nil && string(old) == sum {
			continue
		}
		if err := run(ctr, "--address", c.ContainerdSocket(), "-n", "k8s.io", "images", "import", tar); err != nil {
			return fmt.Errorf("import %s: %w", filepath.Base(tar), err)
		}
		if err := os.WriteFile(record, []byte(sum), 0o644); err != nil {
			return fmt.Errorf("record imported image: %w", err)
		}
		n++
	}
	logf("imported %d of %d images", n, len(tars))
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func syscallKill(pid int) bool {
	return !errors.Is(syscall.Kill(pid, syscall.SIGKILL), syscall.ESRCH)
}
