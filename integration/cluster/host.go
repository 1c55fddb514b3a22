package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// hostPackages names the Debian package that provides each host executable the cluster runs.
var hostPackages = map[string]string{
	"containerd":    "containerd",
	"runc":          "runc",
	"iptables":      "iptables",
	"iptables-save": "iptables",
	"conntrack":     "conntrack",
	"ip":            "iproute2",
}

// cniPlugins are the CNI plugins of the pod network (Debian's containernetworking-plugins).
var cniPlugins = []string{"bridge", "host-local", "loopback", "portmap"}

const cniBinDir = "/usr/lib/cni"

// preflight checks everything Up needs before it changes anything, and says what to install or
// free for each problem found.
func (c Config) preflight() error {
	var errs []error
	var pkgs []string
	for exe, pkg := range hostPackages {
		if _, err := exec.LookPath(exe); err != nil {
			pkgs = append(pkgs, pkg)
		}
	}
	for _, p := range cniPlugins {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			pkgs = append(pkgs, "containernetworking-plugins")
			break
		}
	}
	if len(pkgs) > 0 {
		sort.Strings(pkgs)
		errs = append(errs, fmt.Errorf("missing host packages: run `make cluster-deps` (apt-get install %s)", strings.Join(dedupe(pkgs), " ")))
	}
	for _, b := range []string{"kube-apiserver", "kubelet", "kube-scheduler", "kube-controller-manager", "kube-proxy", "kubectl", "etcd"} {
		if st, err := os.Stat(c.bin(b)); err != nil || st.Mode()&0o111 == 0 {
			errs = append(errs, fmt.Errorf("%s is not built in %s: run `make cluster-bins`", b, c.KubeBinDir))
		}
	}
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("the cluster runs as root (kubelet, containerd and mounts need it)"))
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		errs = append(errs, errors.New("/dev/fuse is missing: the kernel needs FUSE (modprobe fuse)"))
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "overlay") {
		errs = append(errs, errors.New("the kernel has no overlay filesystem, which containerd's snapshotter needs (modprobe overlay)"))
	}
	for _, port := range []int{c.APIServerPort, c.EtcdClientPort, c.EtcdPeerPort, 10250, 10257, 10259, 10249, 10256, 10248, c.S3Port, c.RegistryPort} {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			errs = append(errs, fmt.Errorf("port %d is in use: stop what listens there (ss -ltnp 'sport = :%d')", port, port))
			continue
		}
		_ = l.Close()
	}
	return errors.Join(errs...)
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// sysctls the cluster's components may change: the CNI bridge turns on forwarding, kubelet sets
// its kernel tunables, kube-proxy's iptables rules need bridged traffic to pass iptables.
var sysctls = []string{
	"net/ipv4/ip_forward",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
	"net/ipv4/conf/all/route_localnet",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// saveHost records the host settings the cluster changes, once: a record that exists belongs to
// a cluster that was not stopped, and holds the settings from before it.
func (c Config) saveHost() error {
	dir := c.hostDir()
	if _, err := os.Stat(filepath.Join(dir, "sysctl.json")); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create host record dir: %w", err)
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(tool + "-save").Output()
		if err != nil {
			return fmt.Errorf("%s-save: %w", tool, err)
		}
		if err := os.WriteFile(filepath.Join(dir, tool+".rules"), out, 0o600); err != nil {
			return fmt.Errorf("record %s rules: %w", tool, err)
		}
	}
	values := map[string]string{}
	for _, k := range sysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			values[k] = strings.TrimSpace(string(b))
		}
	}
	b, _ := json.Marshal(values)
	return os.WriteFile(filepath.Join(dir, "sysctl.json"), b, 0o600)
}

// restoreHost puts back the iptables rules and sysctls saveHost recorded, then forgets them.
func (c Config) restoreHost() error {
	dir := c.hostDir()
	b, err := os.ReadFile(filepath.Join(dir, "sysctl.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read host record: %w", err)
	}
	var errs []error
	for _, tool := range []string{"iptables", "ip6tables"} {
		rules, err := os.ReadFile(filepath.Join(dir, tool+".rules"))
		if err != nil {
			errs = append(errs, fmt.Errorf("read recorded %s rules: %w", tool, err))
			continue
		}
		// iptables-restore replaces only the tables its input names: empty the others first.
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			_ = run(tool, "-t", table, "-F")
			_ = run(tool, "-t", table, "-X")
		}
		cmd := exec.Command(tool + "-restore")
		cmd.Stdin = strings.NewReader(string(rules))
		if out, err := cmd.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s-restore: %w: %s", tool, err, out))
		}
	}
	var values map[string]string
	if err := json.Unmarshal(b, &values); err != nil {
		errs = append(errs, fmt.Errorf("parse recorded sysctls: %w", err))
	}
	for k, v := range values {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", k, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.forgetHost()
}

// forgetHost removes the host record, except the marker of a bind of the network namespace dir
// that Down had to leave in place (releaseNetns says why): the next Down removes it.
func (c Config) forgetHost() error {
	if _, err := os.Stat(c.netnsMarker()); err != nil {
		return os.RemoveAll(c.hostDir())
	}
	entries, err := os.ReadDir(c.hostDir())
	if err != nil {
		return fmt.Errorf("read host record: %w", err)
	}
	for _, e := range entries {
		if e.Name() != filepath.Base(c.netnsMarker()) {
			if err := os.RemoveAll(filepath.Join(c.hostDir(), e.Name())); err != nil {
				return fmt.Errorf("remove host record: %w", err)
			}
		}
	}
	return nil
}

func writeSysctl(key, value string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644); err != nil {
		return fmt.Errorf("set sysctl %s: %w", key, err)
	}
	return nil
}

// bridgeUp creates the pod network's bridge with the node's address before anything starts, so
// the API server can advertise that address and kubelet can use it as the node IP.
//
// Problem: a Linux bridge whose MAC address was never set takes the lowest MAC of its ports, so
// the pods' gateway changed its MAC whenever a pod's veth joined or left; the other pods' ARP
// entries kept the old one and their packets to the node (the API server, S3) were lost until
// the entries expired, up to about 30 s.
// Solution: the bridge gets a fixed, locally administered MAC made of its IPv4 address; a MAC
// set by hand is never replaced by a port's.
func (c Config) bridgeUp() error {
	if _, err := net.InterfaceByName(c.Bridge); err != nil {
		if err := run("ip", "link", "add", c.Bridge, "type", "bridge"); err != nil {
			return err
		}
	}
	if err := run("ip", "link", "set", c.Bridge, "address", c.bridgeMAC()); err != nil {
		return err
	}
	if err := run("ip", "addr", "replace", c.BridgeAddr.String(), "dev", c.Bridge); err != nil {
		return err
	}
	return run("ip", "link", "set", c.Bridge, "up")
}

// bridgeMAC is 02:53 (locally administered, unicast) followed by the bridge's IPv4 address.
func (c Config) bridgeMAC() string {
	a := c.BridgeAddr.Addr().As4()
	return fmt.Sprintf("02:53:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3])
}

func (c Config) bridgeDown() error {
	if _, err := net.InterfaceByName(c.Bridge); err != nil {
		return nil
	}
	return run("ip", "link", "del", c.Bridge)
}

// A mountEntry is one line of /proc/self/mountinfo: the mount's ID, the ID of the mount it sits
// on, and its mount point. Two entries may share a mount point: the later is stacked on the other.
type mountEntry struct {
	id, parent int
	point      string
}

// readMountTable reads this process's mount table, in mount order.
func readMountTable() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	var out []mountEntry
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		id, err1 := strconv.Atoi(fields[0])
		parent, err2 := strconv.Atoi(fields[1])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, mountEntry{id: id, parent: parent, point: unescapeMountPath(fields[4])})
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return out, nil
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// mountsUnder lists the mount points under any of the dirs, deepest first.
func mountsUnder(dirs ...string) ([]string, error) {
	table, err := readMountTable()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range table {
		for _, d := range dirs {
			if under(m.point, d) {
				out = append(out, m.point)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out, nil
}

// unescapeMountPath undoes the octal escapes (\040 for a space) of /proc/self/mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll detaches every mount under the dirs, deepest first. A FUSE mount whose server is
// gone is detached too (MNT_DETACH never waits on it).
func unmountAll(dirs ...string) error {
	for range 5 {
		mps, err := mountsUnder(dirs...)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			_ = unix.Unmount(mp, unix.MNT_DETACH)
		}
	}
	mps, err := mountsUnder(dirs...)
	if err != nil {
		return err
	}
	if len(mps) > 0 {
		return fmt.Errorf("unmount: %d mounts remain under %v, first %s", len(mps), dirs, mps[0])
	}
	return nil
}
