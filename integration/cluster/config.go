// Package cluster starts and stops a real single-node Kubernetes cluster on this machine: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet, kube-proxy and
// CoreDNS, with a CNI bridge for the pod network, versitygw as the S3 server and a registry the
// product's images and chart are pulled from (registry.go). The demo and the e2e suite run on it;
// the chart needs no switch of its own to be installed there.
//
// Every process is started by PID and stopped by PID (pid files under the state dir), and what the
// cluster changes on the host (sysctls, iptables rules, the bridge, mounts) is recorded on start
// and restored on stop. A second Up reuses a running cluster.
package cluster

import (
	"fmt"
	"net/netip"
	"path/filepath"
)

// Config places the cluster on the host. Zero fields take the defaults of Defaults.
type Config struct {
	// RepoRoot is the repository, for deploy/cluster templates and bin/ tools.
	RepoRoot string
	// KubeBinDir holds kube-apiserver, kubelet, kube-scheduler, kube-controller-manager,
	// kube-proxy, kubectl and etcd (hack/kube-bins.sh).
	KubeBinDir string
	// StateDir keeps what survives a restart of the cluster: PKI, the containerd image store,
	// logs, saved host settings. etcd's data is removed on Down.
	StateDir string
	// RunDir holds sockets, pid files and containerd's state.
	RunDir string
	// KubeletDir is kubelet's root dir; the node-agent's hostPaths sit under it.
	KubeletDir string
	// NodeName is the name of the one node.
	NodeName string
	// Bridge is the CNI bridge of the pod network; BridgeAddr its address (the node's IP, the
	// gateway of the pods, where the API server and S3 are reached from pods).
	Bridge     string
	BridgeAddr netip.Prefix
	// PodRange is the pods' address range (a part of BridgeAddr's prefix).
	PodRange netip.Prefix
	// ServiceRange is the Services' range; its first address is the kubernetes Service, DNSAddr
	// CoreDNS's.
	ServiceRange netip.Prefix
	DNSAddr      netip.Addr
	// APIServerPort and the etcd ports are fixed so a kubeconfig stays valid across restarts.
	APIServerPort, EtcdClientPort, EtcdPeerPort int
	// S3Port is where versitygw listens (HTTPS), on BridgeAddr.
	S3Port int
	// RegistryPort is where the cluster's registry listens, on the loopback (registry.go).
	RegistryPort int
	// S3AccessKey and S3SecretKey are versitygw's root credentials (a test-only server).
	S3AccessKey, S3SecretKey string
}

// Defaults returns the configuration the demo and the e2e suite use.
func Defaults(repoRoot, kubeBinDir string) Config {
	return Config{
		RepoRoot:       repoRoot,
		KubeBinDir:     kubeBinDir,
		StateDir:       "/var/lib/s3csi-cluster",
		RunDir:         "/run/s3csi-cluster",
		KubeletDir:     "/var/lib/kubelet",
		NodeName:       "s3csi-node",
		Bridge:         "s3csi0",
		BridgeAddr:     netip.MustParsePrefix("10.244.0.1/16"),
		PodRange:       netip.MustParsePrefix("10.244.0.0/24"),
		ServiceRange:   netip.MustParsePrefix("10.96.0.0/16"),
		DNSAddr:        netip.MustParseAddr("10.96.0.10"),
		APIServerPort:  6443,
		EtcdClientPort: 23790,
		EtcdPeerPort:   23800,
		S3Port:         7070,
		RegistryPort:   5000,
		S3AccessKey:    "S3CSIDEMOACCESSKEY00",
		S3SecretKey:    "s3csiDemoSecretKey000000000000000000000000",
	}
}

// NodeIP is the node's address: the bridge's.
func (c Config) NodeIP() netip.Addr { return c.BridgeAddr.Addr() }

// KubernetesServiceIP is the first address of the Service range.
func (c Config) KubernetesServiceIP() netip.Addr { return c.ServiceRange.Addr().Next() }

// Kubeconfig is the admin kubeconfig the host uses.
func (c Config) Kubeconfig() string { return filepath.Join(c.StateDir, "admin.kubeconfig") }

// S3Endpoint is versitygw's URL as pods and the host reach it. It serves HTTPS only, with a
// certificate of a CA of its own (S3CAFile), as an on-premises endpoint behind a private CA.
func (c Config) S3Endpoint() string { return fmt.Sprintf("https://%s:%d", c.NodeIP(), c.S3Port) }

// S3CAFile is the PEM of the CA that signed versitygw's certificate: the chart gets it as
// s3.caBundle, and host-side clients trust it.
func (c Config) S3CAFile() string { return filepath.Join(c.pkiDir(), "s3-ca.crt") }

// S3DataDir is versitygw's posix backend: a bucket is a directory, an object a file.
func (c Config) S3DataDir() string { return filepath.Join(c.StateDir, "s3") }

// s3IAMDir holds versitygw's users, beside (not in) the data dir, where it would be a bucket.
func (c Config) s3IAMDir() string { return filepath.Join(c.StateDir, "s3-iam") }

// ContainerdSocket is the CRI endpoint of the cluster's containerd.
func (c Config) ContainerdSocket() string {
	return filepath.Join(c.RunDir, "containerd", "containerd.sock")
}

func (c Config) pkiDir() string  { return filepath.Join(c.StateDir, "pki") }
func (c Config) logDir() string  { return filepath.Join(c.StateDir, "logs") }
func (c Config) pidDir() string  { return filepath.Join(c.RunDir, "pids") }
func (c Config) confDir() string { return filepath.Join(c.StateDir, "conf") }
func (c Config) hostDir() string { return filepath.Join(c.StateDir, "host") }
func (c Config) bin(name string) string {
	return filepath.Join(c.KubeBinDir, name)
}

// LogFile is where a component's output goes.
func (c Config) LogFile(component string) string {
	return filepath.Join(c.logDir(), component+".log")
}
