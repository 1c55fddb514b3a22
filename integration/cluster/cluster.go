package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Components in start order; Down stops them in reverse.
var components = []string{
	"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
	"registry", "containerd", "kubelet", "kube-proxy", "versitygw",
}

// Up starts the cluster, or returns at once when it already runs. A cluster found half running is
// stopped and started again. logf reports progress.
func (c Config) Up(ctx context.Context, logf func(string, ...any)) error {
	if c.Healthy(ctx) == nil {
		logf("cluster already running")
		return nil
	}
	for _, name := range components {
		if _, ok := c.running(name); ok {
			logf("a part of the cluster runs (%s): stopping it first", name)
			if err := c.Down(logf); err != nil {
				return err
			}
			break
		}
	}
	if err := c.preflight(); err != nil {
		return fmt.Errorf("cluster preflight:\n%w", err)
	}
	start := time.Now()
	if err := c.saveHost(); err != nil {
		return err
	}
	if err := c.pki(); err != nil {
		return err
	}
	if err := c.render(); err != nil {
		return err
	}
	if err := c.bridgeUp(); err != nil {
		return err
	}
	for k, v := range map[string]string{"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1", "net/bridge/bridge-nf-call-ip6tables": "1"} {
		if err := writeSysctl(k, v); err != nil {
			return err
		}
	}
	// Before containerd mounts the first pod's network namespace (netns.go says why).
	if err := shareNetns(netnsDir(), c.netnsMarker(), logf); err != nil {
		return err
	}
	for _, step := range []struct {
		name  string
		start func() error
		ready func(context.Context) error
	}{
		{"etcd", c.startEtcd, func(ctx context.Context) error {
			return httpOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", c.EtcdClientPort))
		}},
		{"kube-apiserver", c.startAPIServer, func(ctx context.Context) error {
			return httpOK(ctx, fmt.Sprintf("https://127.0.0.1:%d/readyz", c.APIServerPort))
		}},
		{"kube-controller-manager", c.startControllerManager, func(ctx context.Context) error {
			return httpOK(ctx, "https://127.0.0.1:10257/healthz")
		}},
		{"kube-scheduler", c.startScheduler, func(ctx context.Context) error {
			return httpOK(ctx, "https://127.0.0.1:10259/healthz")
		}},
		{"registry", c.startRegistry, func(ctx context.Context) error {
			return httpOK(ctx, "http://"+c.RegistryHost()+"/v2/")
		}},
		{"containerd", c.startContainerd, func(ctx context.Context) error {
			// A socket file alone proves nothing: one left by an earlier containerd refuses connections.
			conn, err := (&net.Dialer{}).DialContext(ctx, "unix", c.ContainerdSocket())
			if err != nil {
				return err
			}
			return conn.Close()
		}},
		{"images", func() error { return c.LoadImages(logf) }, nil},
		{"kubelet", c.startKubelet, func(ctx context.Context) error {
			return c.kubectlQuiet(ctx, "wait", "--for=condition=Ready", "node/"+c.NodeName, "--timeout=2s")
		}},
		{"kube-proxy", c.startKubeProxy, func(ctx context.Context) error {
			return httpOK(ctx, "http://127.0.0.1:10256/healthz")
		}},
		{"versitygw", c.startVersitygw, func(ctx context.Context) error {
			return httpAny(ctx, c.S3Endpoint())
		}},
		{"coredns", c.startCoreDNS, func(ctx context.Context) error {
			return c.kubectlQuiet(ctx, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=2s")
		}},
	} {
		t := time.Now()
		for attempt := 1; ; attempt++ {
			if err := step.start(); err != nil {
				return fmt.Errorf("start %s: %w", step.name, err)
			}
			if step.ready == nil {
				break
			}
			err := c.waitReady(ctx, step.name, step.ready)
			if err == nil {
				break
			}
			if attempt == 3 || !c.startupRace(step.name) {
				return err
			}
			logf("%s died of a race of its own at start (%s): starting it again", step.name, kubeletStartupRace)
		}
		logf("%-24s ready in %v", step.name, time.Since(t).Round(10*time.Millisecond))
	}
	logf("cluster up in %v", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// waitReady polls ready for up to two minutes; a component that died meanwhile fails at once
// with the end of its log.
func (c Config) waitReady(ctx context.Context, name string, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var err error
	for {
		if err = ready(ctx); err == nil {
			return nil
		}
		if _, ok := c.running(name); !ok && isDaemon(name) {
			return fmt.Errorf("%s exited; the end of %s:\n%s", name, c.LogFile(name), c.tail(name, 20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after 2m: %w; see %s", name, err, c.LogFile(name))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// kubeletStartupRace is the end of a kubelet v1.34 that lost a race of its own while starting:
// its node status reads the container manager's capacity while the manager's start writes it
// (kubernetes/kubernetes#119637, never merged). A kubelet started again comes up.
const kubeletStartupRace = "fatal error: concurrent map iteration and map write"

// startupRace reports whether the daemon exited of kubeletStartupRace, per the log of its last
// start (the log file keeps every start, each after a "==== " line).
func (c Config) startupRace(name string) bool {
	if _, ok := c.running(name); ok || name != "kubelet" {
		return false
	}
	b, err := os.ReadFile(c.LogFile(name))
	if err != nil {
		return false
	}
	if i := bytes.LastIndex(b, []byte("\n==== ")); i >= 0 {
		b = b[i:]
	}
	return bytes.Contains(b, []byte(kubeletStartupRace))
}

func isDaemon(name string) bool {
	for _, c := range components {
		if c == name {
			return true
		}
	}
	return false
}

// Healthy reports whether every daemon runs and the API server is ready.
func (c Config) Healthy(ctx context.Context) error {
	for _, name := range components {
		if _, ok := c.running(name); !ok {
			return fmt.Errorf("%s is not running", name)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return httpOK(ctx, fmt.Sprintf("https://127.0.0.1:%d/readyz", c.APIServerPort))
}

// Down stops every process Up started, removes what the pods left (containers, mounts, network
// namespaces, even under a bind another tool stacked on them, the bridge) and restores the host's
// iptables rules, sysctls and /run/netns as Up found it. The PKI and the logs
// stay; etcd's data, the image store and the registry go, so the next Up starts an empty cluster.
func (c Config) Down(logf func(string, ...any)) error {
	var errs []error
	for _, name := range []string{"kube-proxy", "kubelet"} {
		errs = append(errs, c.stop(name, 15*time.Second))
	}
	// Pods' processes first, while containerd still runs to reap them: everything in kubelet's
	// cgroups, Mountpoint Pods (FUSE servers) included.
	if n := killCgroup("kubepods"); n > 0 {
		logf("killed %d pod processes", n)
	}
	for _, name := range []string{"versitygw", "containerd", "registry", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		errs = append(errs, c.stop(name, 15*time.Second))
	}
	killShims(c.ContainerdSocket())
	errs = append(errs, unmountAll(c.KubeletDir, c.RunDir, filepath.Join(c.StateDir, "containerd")))
	errs = append(errs, releaseNetns(netnsDir(), c.netnsMarker(), logf))
	if mps, err := mountsUnder(c.KubeletDir, c.StateDir); err == nil && len(mps) == 0 {
		for _, dir := range []string{c.KubeletDir, filepath.Join(c.StateDir, "etcd"), filepath.Join(c.StateDir, "containerd"),
			filepath.Join(c.StateDir, "images"), c.registryDir(), c.releaseTagFile(), c.S3DataDir(), c.RunDir, "/var/lib/cni/networks/s3csi"} {
			errs = append(errs, os.RemoveAll(dir))
		}
	} else {
		errs = append(errs, fmt.Errorf("mounts remain under %s or %s: nothing removed", c.KubeletDir, c.StateDir))
	}
	errs = append(errs, c.bridgeDown(), c.restoreHost())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop cluster: %w", err)
	}
	logf("cluster stopped; host settings restored")
	return nil
}

// killCgroup SIGKILLs every process whose cgroup path contains the segment, and waits for them
// to go. It returns how many it signaled.
func killCgroup(segment string) int {
	n := 0
	for range 20 {
		pids := procsWhere(func(pid int) bool {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			return err == nil && strings.Contains(string(b), "/"+segment+"/")
		})
		if len(pids) == 0 {
			return n
		}
		for _, pid := range pids {
			if syscallKill(pid) {
				n++
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return n
}

// killShims stops the containerd shims of the cluster's containerd, which outlive it.
func killShims(socket string) {
	for _, pid := range procsWhere(func(pid int) bool {
		// Problem: reading /proc/PID/cmdline takes the process's memory lock, which a process
		// stuck in uninterruptible sleep (e.g. on a FUSE connection that died mid-exec) never
		// releases, so the read never returns. Its comm needs no lock.
		// Solution: read cmdline only of processes named like a shim.
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || !strings.HasPrefix(string(comm), "containerd-shim") {
			return false
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return err == nil && strings.Contains(string(b), "containerd-shim") && strings.Contains(string(b), socket)
	}) {
		syscallKill(pid)
	}
}

func procsWhere(match func(int) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		if match(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// render writes the component configurations from deploy/cluster into the state dir.
func (c Config) render() error {
	dir := c.confDir()
	if err := os.MkdirAll(filepath.Join(dir, "cni"), 0o755); err != nil {
		return fmt.Errorf("create config dir: %w", err)
	}
	data := struct {
		Config
		ContainerdSocket string
		NodeIP           netip.Addr
		PodRangeLast     netip.Addr
		RegistryHost     string
	}{c, c.ContainerdSocket(), c.NodeIP(), lastAddr(c.PodRange), c.RegistryHost()}
	for src, dst := range map[string]string{
		"containerd.toml": "containerd.toml",
		"hosts.toml":      filepath.Join("certs.d", c.RegistryHost(), "hosts.toml"),
		"cni.conflist":    "cni/10-s3csi.conflist",
		"kubelet.yaml":    "kubelet.yaml",
		"kube-proxy.yaml": "kube-proxy.yaml",
		"coredns.yaml":    "coredns.yaml",
	} {
		tmpl, err := template.ParseFiles(filepath.Join(c.RepoRoot, "deploy", "cluster", src))
		if err != nil {
			return fmt.Errorf("read template: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, dst)), 0o755); err != nil {
			return fmt.Errorf("create config dir: %w", err)
		}
		f, err := os.Create(filepath.Join(dir, dst))
		if err != nil {
			return fmt.Errorf("write %s: %w", dst, err)
		}
		err = tmpl.Execute(f, data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("render %s: %w", src, err)
		}
	}
	return nil
}

// lastAddr is the last usable address of a prefix (its broadcast address less one).
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	v--
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// insecureClient checks only that a component answers; identity is not the question here.
var insecureClient = &http.Client{
	Timeout:   3 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // readiness probe of local components
}

func httpOK(ctx context.Context, url string) error { return httpGet(ctx, url, true) }

// httpAny succeeds when the server answers at all (S3 answers 403 to an unsigned request).
func httpAny(ctx context.Context, url string) error { return httpGet(ctx, url, false) }

func httpGet(ctx context.Context, url string, wantOK bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := insecureClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if wantOK && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Kubectl runs kubectl against the cluster with the given output streams.
func (c Config) Kubectl(ctx context.Context, stdout, stderr io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, c.bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (c Config) kubectlQuiet(ctx context.Context, args ...string) error {
	var out strings.Builder
	if err := c.Kubectl(ctx, &out, &out, args...); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// RestartAPIServer stops kube-apiserver (SIGTERM, SIGKILL 5 s later: its graceful shutdown can
// wait far longer for open watches), keeps it down for down, starts it again and waits until it
// is ready: an API server restarted under the cluster, as a control-plane upgrade or a crash does.
func (c Config) RestartAPIServer(ctx context.Context, down time.Duration) error {
	if err := c.stop("kube-apiserver", 5*time.Second); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	if err := c.startAPIServer(); err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	return c.waitReady(ctx, "kube-apiserver", func(ctx context.Context) error {
		return httpOK(ctx, fmt.Sprintf("https://127.0.0.1:%d/readyz", c.APIServerPort))
	})
}
