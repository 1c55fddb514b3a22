package testenv

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSCluster is a JetStream cluster of in-process nats-servers on loopback: every server
// routes to every other, each with its own file store, as the chart's `nats.replicas: 3`
// StatefulSet runs them.
type NATSCluster struct {
	mu      sync.Mutex
	servers []*server.Server
	clients []int // client port of each server
}

// StartNATSClusterE starts n (>= 3 for a JetStream quorum) clustered JetStream servers storing
// under storeDir and returns once each accepts clients. A stream with replicas > 1 can be
// created once the cluster has elected its meta leader, a second or so later: callers retry.
func StartNATSClusterE(n int, storeDir string) (*NATSCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("start NATS cluster: %d servers", n)
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, fmt.Errorf("start NATS cluster: %w", err)
	}
	routes := make([]string, n)
	for i := range n {
		routes[i] = "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[n+i]))
	}
	c := &NATSCluster{clients: ports[:n]}
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("s3csi-test-%d", i),
			Host:       "127.0.0.1",
			Port:       ports[i],
			JetStream:  true,
			StoreDir:   filepath.Join(storeDir, strconv.Itoa(i)),
			Cluster:    server.ClusterOpts{Name: "s3csi-test", Host: "127.0.0.1", Port: ports[n+i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
			NoSigs:     true,
			NoLog:      true,
		}
		srv, err := server.NewServer(opts)
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("create NATS server %d: %w", i, err)
		}
		go srv.Start()
		c.servers = append(c.servers, srv)
	}
	for i, srv := range c.servers {
		if !srv.ReadyForConnections(natsReadyTimeout) {
			c.Stop()
			return nil, fmt.Errorf("start NATS server %d: not ready after %s", i, natsReadyTimeout)
		}
	}
	return c, nil
}

// StartNATSCluster starts an n-server cluster for one test and stops it when the test ends.
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	c, err := StartNATSClusterE(n, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// URLs is the comma-separated client URL list of every server, as a client that may fail over
// is given it (the services' --nats-url takes the same form).
func (c *NATSCluster) URLs() string {
	urls := make([]string, len(c.clients))
	for i, p := range c.clients {
		urls[i] = (&url.URL{Scheme: "nats", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))}).String()
	}
	return strings.Join(urls, ",")
}

// Len is the number of servers, stopped ones included.
func (c *NATSCluster) Len() int { return len(c.clients) }

// Server is the i-th server, or nil once it was stopped.
func (c *NATSCluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// StopServer shuts the i-th server down and waits until it is gone; the others keep running.
// It is idempotent.
func (c *NATSCluster) StopServer(i int) {
	c.mu.Lock()
	srv := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Stop shuts every server down. It is idempotent.
func (c *NATSCluster) Stop() {
	for i := range c.servers {
		c.StopServer(i)
	}
}

// freePorts reserves n distinct loopback ports by listening on them at once, then frees them
// for the servers to take.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, fmt.Errorf("find a free port: listener address %v is not TCP", l.Addr())
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}
