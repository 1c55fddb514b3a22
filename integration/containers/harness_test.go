//go:build containers

package containers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

// adminPort is where every service container serves /healthz, /readyz and /metrics.
const adminPort = "8080/tcp"

// stack is one test's system: a real API server and versitygw on the host, reached by the
// containers through forwarders on the gateway of the "api" network; NATS as a container on the
// "bus" network (so a service can be cut from the bus and keep the API server); and the service
// containers, on both networks. Every test has its own, removed when it ends.
type stack struct {
	t       *testing.T
	id      string
	node    string
	api     *testenv.APIServer
	s3      *testenv.S3
	kubelet *testenv.KubeletDir
	// apiNet and busNet are the Podman networks; gateway is the host on apiNet.
	apiNet, busNet string
	gateway        string
	// dir holds what the containers mount: etc/ (read-only at /etc/s3csi in every service:
	// kubeconfig, ownership keys), nats/ (the NATS store), csi/ (the controller's socket).
	dir string
	etc string
	// s3URL is versitygw as the containers reach it.
	s3URL string
	// nats is the NATS container; natsURL reaches it from the test, natsInner from the containers.
	nats      testcontainers.Container
	natsURL   string
	natsInner string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{t: t, id: randomID(), node: "node-a"}
	s.api = testenv.StartAPIServer(t)
	s.s3 = testenv.StartS3(t)
	s.apiNet = s.network("api")
	s.busNet = s.network("bus")
	out, err := podman("network", "inspect", "--format", "{{range .Subnets}}{{.Gateway}}{{end}}", s.apiNet)
	if err != nil || net.ParseIP(out) == nil {
		t.Fatalf("gateway of network %s: %q, %v", s.apiNet, out, err)
	}
	s.gateway = out
	apiAddr := s.forward(strings.TrimSuffix(strings.TrimPrefix(s.api.Config.Host, "https://"), "/"))
	s.s3URL = "http://" + s.forward(strings.TrimPrefix(s.s3.Endpoint, "http://"))

	// World-readable, as a Secret volume is to the services' non-root users.
	s.dir = filepath.Join(os.TempDir(), "s3csi-containers-"+s.id)
	s.etc = filepath.Join(s.dir, "etc")
	if err := os.MkdirAll(filepath.Join(s.etc, "ownership-keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(s.dir) })
	s.kubelet = testenv.StartKubeletDirIn(t, s.dir)
	s.writeKubeconfig(apiAddr)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if err := os.WriteFile(filepath.Join(s.etc, "ownership-keys", "key"), []byte(hex.EncodeToString(key)), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx := t.Context()
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mppod.DefaultNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "s3csi"}},
		fixture.Node(s.node),
	} {
		if err := s.api.Client.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	s.startNATS()
	return s
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// pinBridgeMACs gives each of the test's network bridges that exists its current MAC address as
// a set one, once.
//
// Problem: a Linux bridge whose MAC was never set (netavark's have a random one,
// addr_assign_type 1) takes the lowest MAC of its ports, so a
// container joining the network with a lower one changes the gateway's MAC under the containers
// already there, and their packets to the host (the API server's and S3's forwarders) are lost
// until their ARP entries expire: a CreateVolume failed after 30 s of "dial tcp 10.89.0.1:…:
// i/o timeout" (docs/cluster.md says the same of the cluster's bridge).
// Solution: netavark creates a bridge when the first container joins; right after each container
// start, a bridge whose MAC is not set yet gets its current one, which never changes after.
// Invariant: from its first container on, a network's gateway keeps one MAC.
func (s *stack) pinBridgeMACs() {
	s.t.Helper()
	for _, n := range []string{s.apiNet, s.busNet} {
		dev, err := podman("network", "inspect", "--format", "{{.NetworkInterface}}", n)
		if err != nil || dev == "" {
			s.t.Fatalf("bridge of network %s: %q, %v", n, dev, err)
		}
		sys := filepath.Join("/sys/class/net", dev)
		assign, err := os.ReadFile(filepath.Join(sys, "addr_assign_type"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // no container joined yet
		}
		if err != nil {
			s.t.Fatal(err)
		}
		if strings.TrimSpace(string(assign)) == "3" { // NET_ADDR_SET
			continue
		}
		mac, err := os.ReadFile(filepath.Join(sys, "address"))
		if err != nil {
			s.t.Fatal(err)
		}
		if out, err := exec.Command("ip", "link", "set", "dev", dev, "address", strings.TrimSpace(string(mac))).CombinedOutput(); err != nil {
			s.t.Fatalf("set the MAC of bridge %s: %v: %s", dev, err, out)
		}
	}
}

// network creates a Podman network for the test and removes it when the test ends.
func (s *stack) network(role string) string {
	s.t.Helper()
	name := "s3csi-" + role + "-" + s.id
	if out, err := podman("network", "create", name); err != nil {
		s.t.Fatalf("create network %s: %v\n%s", name, err, out)
	}
	s.t.Cleanup(func() {
		if out, err := podman("network", "rm", "--force", name); err != nil {
			s.t.Errorf("remove network %s: %v\n%s", name, err, out)
		}
	})
	return name
}

// forward listens on the api network's gateway and copies every connection to target, a
// service on the host's loopback. It returns the address the containers dial.
func (s *stack) forward(target string) string {
	s.t.Helper()
	// netavark gives the bridge its gateway address when the first container joins the network:
	// IP_FREEBIND binds to it before it exists.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	l, err := lc.Listen(s.t.Context(), "tcp", net.JoinHostPort(s.gateway, "0"))
	if err != nil {
		s.t.Fatalf("forwarder to %s: %v", target, err)
	}
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
	}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				track(in, true)
				track(out, true)
				defer track(in, false)
				defer track(out, false)
				done := make(chan struct{})
				go func() { _, _ = io.Copy(out, in); close(done) }()
				_, _ = io.Copy(in, out)
				<-done
			}()
		}
	}()
	s.t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// writeKubeconfig writes /etc/s3csi/kubeconfig: the API server through its forwarder, with the
// name its serving certificate carries.
func (s *stack) writeKubeconfig(apiAddr string) {
	s.t.Helper()
	path := filepath.Join(s.etc, "kubeconfig")
	if err := s.api.Kubeconfig(path); err != nil {
		s.t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + apiAddr
		c.TLSServerName = "localhost"
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// startNATS runs the NATS image on the bus network, its client port published on a fixed
// loopback port so a restarted container keeps its address, its store on a host directory so
// a restarted container keeps its stream.
func (s *stack) startNATS() {
	s.t.Helper()
	port := freePort(s.t)
	store := filepath.Join(s.dir, "nats")
	if err := os.MkdirAll(store, 0o777); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chmod(store, 0o777); err != nil {
		s.t.Fatal(err)
	}
	name := "nats-" + s.id
	s.nats = s.run(testcontainers.ContainerRequest{
		Name:           name,
		Image:          images["nats"],
		Cmd:            []string{"--jetstream", "--store_dir=/data", "--port=4222", "--http_port=8222", "--server_name=" + name},
		ExposedPorts:   []string{"4222/tcp"},
		Networks:       []string{s.busNet},
		NetworkAliases: map[string][]string{s.busNet: {"nats"}},
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.Binds = append(hc.Binds, store+":/data")
			hc.PortBindings = network.PortMap{
				network.MustParsePort("4222/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}},
			}
		},
		WaitingFor: wait.ForLog("Server is ready").WithStartupTimeout(30 * time.Second),
	})
	s.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	s.natsInner = "nats://nats:4222"
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// run starts a container, removes it when the test ends and, when the test failed, logs the
// end of its output first.
func (s *stack) run(req testcontainers.ContainerRequest) testcontainers.Container {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Minute)
	defer cancel()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	s.pinBridgeMACs()
	testcontainers.CleanupContainer(s.t, c)
	if c != nil {
		s.t.Cleanup(func() {
			if s.t.Failed() {
				s.t.Logf("the end of container %s's output:\n%s", req.Name, tail(logsOf(c), 60))
			}
		})
	}
	if err != nil {
		s.t.Fatalf("start container %s (%s): %v", req.Name, req.Image, err)
	}
	return c
}

func logsOf(c testcontainers.Container) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Logs(ctx)
	if err != nil {
		return fmt.Sprintf("(no logs: %v)", err)
	}
	defer r.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, r)
	return b.String()
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// service is a service container of the stack: its image, flags beyond the common ones, and
// what it needs of the host.
type service struct {
	name       string // image key: pod-reconciler, janitor, controller, node-agent
	args       []string
	env        map[string]string
	privileged bool
	binds      []string
}

// start runs the service on both networks with the common flags (kubeconfig, NATS, admin
// address, logs) and waits for its /healthz.
func (s *stack) start(svc service) testcontainers.Container {
	s.t.Helper()
	binary := map[string]string{
		"controller": "/s3csi-controller", "pod-reconciler": "/s3csi-pod-reconciler",
		"node-agent": "/s3csi-node-agent", "janitor": "/s3csi-janitor",
	}[svc.name]
	args := append([]string{
		"--kubeconfig=/etc/s3csi/kubeconfig", "--nats-url=" + s.natsInner,
		"--admin-address=:" + strings.TrimSuffix(adminPort, "/tcp"), "--log-level=1",
	}, svc.args...)
	return s.run(testcontainers.ContainerRequest{
		Name:         svc.name + "-" + randomID() + "-" + s.id,
		Image:        images[svc.name],
		Entrypoint:   []string{binary},
		Cmd:          args,
		Env:          svc.env,
		ExposedPorts: []string{adminPort},
		Networks:     []string{s.apiNet, s.busNet},
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.Privileged = svc.privileged
			hc.Binds = append(hc.Binds, s.etc+":/etc/s3csi:ro")
			hc.Binds = append(hc.Binds, svc.binds...)
			hc.PortBindings = network.PortMap{
				network.MustParsePort(adminPort): {{HostIP: netip.MustParseAddr("127.0.0.1")}},
			}
		},
		WaitingFor: wait.ForHTTP("/healthz").WithPort(adminPort).WithStartupTimeout(60 * time.Second),
	})
}

// podReconciler starts a pod-reconciler; leader election is on when the test runs two.
func (s *stack) podReconciler(leaderElect bool) testcontainers.Container {
	return s.start(service{name: "pod-reconciler", args: []string{
		"--leader-elect=" + strconv.FormatBool(leaderElect), "--leader-election-namespace=s3csi",
		"--mountpoint-namespace=" + mppod.DefaultNamespace, "--mountpoint-image=" + images["mounter"],
		"--mountpoint-image-pull-policy=Never",
	}})
}

func (s *stack) janitor() testcontainers.Container {
	return s.start(service{name: "janitor", args: []string{
		"--leader-elect=false", "--mountpoint-namespace=" + mppod.DefaultNamespace,
	}})
}

// controller starts the csi-controller with its CSI socket in a host directory, returned.
func (s *stack) controller() (testcontainers.Container, string) {
	// Writable by the controller's user, as the Deployment's emptyDir is.
	dir := filepath.Join(s.dir, "csi")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		s.t.Fatal(err)
	}
	c := s.start(service{
		name: "controller",
		args: []string{
			"--csi-endpoint=unix:///csi/csi.sock", "--s3-endpoint=" + s.s3URL, "--s3-path-style=true",
			"--credentials-dir=", "--ownership-keys-dir=/etc/s3csi/ownership-keys",
		},
		env:   map[string]string{"AWS_ACCESS_KEY_ID": s.s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s.s3.SecretKey},
		binds: []string{dir + ":/csi"},
	})
	return c, filepath.Join(dir, "csi.sock")
}

// nodeAgent starts the node-agent as its DaemonSet runs it: privileged, with the kubelet dir
// (a shared mount) at the same path and Bidirectional propagation.
func (s *stack) nodeAgent() testcontainers.Container {
	root := s.kubelet.Root
	return s.start(service{
		name: "node-agent",
		args: []string{
			"--node-name=" + s.node, "--kubelet-dir=" + root,
			"--csi-endpoint=unix://" + filepath.Join(mppod.PluginDir(root), "csi.sock"),
			"--mountpoint-namespace=" + mppod.DefaultNamespace, "--mountpoint-image=" + images["mounter"],
			"--s3-endpoint-url=" + s.s3URL, "--s3-path-style=true", "--remove-startup-taint=false",
		},
		env:        map[string]string{"AWS_ACCESS_KEY_ID": s.s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s.s3.SecretKey},
		privileged: true,
		binds:      []string{root + ":" + root + ":rshared"},
	})
}
