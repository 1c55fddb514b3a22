package cluster

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPreflightSaysWhatToBuildAndWhatToFree(t *testing.T) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	c := Defaults(t.TempDir(), t.TempDir())
	c.APIServerPort = port
	err = c.preflight()
	if err == nil {
		t.Fatal("preflight with no binaries and a port in use passed")
	}
	for _, want := range []string{
		fmt.Sprintf("port %d is in use", port),
		"kubelet is not built in " + c.KubeBinDir + ": run `make cluster-bins`",
		"etcd is not built",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("preflight error lacks %q:\n%v", want, err)
		}
	}
}

func TestLastAddrIsTheLastUsableAddressOfThePrefix(t *testing.T) {
	tests := []struct{ prefix, want string }{
		{"10.244.0.0/24", "10.244.0.254"},
		{"10.244.0.1/16", "10.244.255.254"},
		{"192.168.1.64/26", "192.168.1.126"},
	}
	for _, tt := range tests {
		if got := lastAddr(netip.MustParsePrefix(tt.prefix)); got.String() != tt.want {
			t.Errorf("lastAddr(%s) = %s, want %s", tt.prefix, got, tt.want)
		}
	}
}

func TestUnescapeMountPathUndoesTheMountTableEscapes(t *testing.T) {
	tests := []struct{ in, want string }{
		{`/var/lib/kubelet/pods/a/volumes`, `/var/lib/kubelet/pods/a/volumes`},
		{`/mnt/with\040space`, `/mnt/with space`},
		{`/mnt/tab\011and\134backslash`, "/mnt/tab\tand\\backslash"},
	}
	for _, tt := range tests {
		if got := unescapeMountPath(tt.in); got != tt.want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A pid file whose PID now runs another program is not this cluster's process: stop must never
// signal it.
func TestRunningIgnoresAPIDReusedByAnotherProgram(t *testing.T) {
	c := Defaults(t.TempDir(), t.TempDir())
	c.RunDir = t.TempDir()
	if err := os.MkdirAll(c.pidDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	write := func(path string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(c.pidDir(), "x.pid"), []byte(fmt.Sprintf("%d\n%s\n", os.Getpid(), path)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(exe)
	if _, ok := c.running("x"); !ok {
		t.Fatal("running() = false for a live process running the recorded executable")
	}
	write("/usr/bin/some-other-program")
	if pid, ok := c.running("x"); ok {
		t.Fatalf("running() = %d, true for a PID that runs another executable", pid)
	}
}

// TestTheBridgeKeepsItsAddressAsPortsComeAndGo: the pods' gateway is the bridge, and pods keep
// its MAC address in their ARP cache. A Linux bridge whose address was never set takes the lowest
// MAC of its ports, so a pod's veth joining or leaving changed the gateway's MAC under every
// other pod, whose packets to the node then went nowhere until their ARP entry expired (a
// Mountpoint Pod's S3 request hung 30 s and failed with EIO).
func TestTheBridgeKeepsItsAddressAsPortsComeAndGo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test creates a bridge: run it as root")
	}
	c := Defaults(t.TempDir(), t.TempDir())
	c.Bridge, c.BridgeAddr = "s3csitest0", netip.MustParsePrefix("10.251.0.1/24")
	t.Cleanup(func() { _ = c.bridgeDown() })
	if err := c.bridgeUp(); err != nil {
		t.Fatal(err)
	}
	before := bridgeMAC(t, c.Bridge)
	// The lowest unicast MAC there is: a bridge that follows its ports takes it.
	if err := run("ip", "link", "add", "s3csitestv0", "address", "00:00:00:00:00:01", "type", "veth", "peer", "name", "s3csitestv1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run("ip", "link", "del", "s3csitestv0") })
	if err := run("ip", "link", "set", "s3csitestv0", "master", c.Bridge); err != nil {
		t.Fatal(err)
	}
	if got := bridgeMAC(t, c.Bridge); got != before {
		t.Errorf("a port joined: the bridge's MAC changed from %s to %s", before, got)
	}
	if err := run("ip", "link", "del", "s3csitestv0"); err != nil {
		t.Fatal(err)
	}
	if got := bridgeMAC(t, c.Bridge); got != before {
		t.Errorf("the port left: the bridge's MAC changed from %s to %s", before, got)
	}
}

func bridgeMAC(t *testing.T, name string) string {
	t.Helper()
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return ifc.HardwareAddr.String()
}
