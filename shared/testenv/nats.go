package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// natsReadyTimeout bounds how long a started server may take to accept clients (~40 ms typically).
const natsReadyTimeout = 10 * time.Second

// NATS is an in-process nats-server with JetStream on a loopback port and a file store in a
// directory the caller owns.
//
// Problem: tests of reconnects and durability need the "same" server to go away and come back.
// Solution: Restart shuts the server down and starts a new one on the same port and store dir.
// Invariant: URL never changes over the lifetime of a NATS, so clients reconnect to it unchanged.
type NATS struct {
	// StoreDir holds the JetStream file store; it survives Restart.
	StoreDir string

	port int
	// conf is the nats.conf text (e.g. an authorization block) the server is started with.
	conf string

	mu  sync.Mutex
	srv *server.Server
}

// StartNATSE starts a JetStream server on 127.0.0.1 and a random port, storing under storeDir.
func StartNATSE(storeDir string) (*NATS, error) {
	return StartNATSConfE(storeDir, "")
}

// StartNATSConfE is StartNATSE with conf added to the server's configuration file, e.g. the
// authorization block of events.AuthorizationConf (whose password variables the server reads
// from the process environment).
func StartNATSConfE(storeDir, conf string) (*NATS, error) {
	srv, err := runNATS(server.RANDOM_PORT, storeDir, conf)
	if err != nil {
		return nil, err
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("find NATS port: listener address %v is not TCP", srv.Addr())
	}
	return &NATS{StoreDir: storeDir, port: addr.Port, conf: conf, srv: srv}, nil
}

// StartNATS starts a JetStream server for one test and stops it when the test ends.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	n, err := StartNATSE(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// StartNATSConf starts a JetStream server with conf (see StartNATSConfE) for one test and stops
// it when the test ends.
func StartNATSConf(t testing.TB, conf string) *NATS {
	t.Helper()
	n, err := StartNATSConfE(t.TempDir(), conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// URL is the client URL, e.g. nats://127.0.0.1:4222. It is the same before and after Restart.
func (n *NATS) URL() string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
}

// Server is the running server, for tests that inspect it (e.g. JetStream accounting).
func (n *NATS) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// RestartE shuts the server down, waits until it is gone, and starts a new one on the same
// port and store dir, so streams, consumers and acknowledged messages survive.
func (n *NATS) RestartE() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
	srv, err := runNATS(n.port, n.StoreDir, n.conf)
	if err != nil {
		return fmt.Errorf("restart NATS: %w", err)
	}
	n.srv = srv
	return nil
}

// Restart is RestartE that fails the test.
func (n *NATS) Restart(t testing.TB) {
	t.Helper()
	if err := n.RestartE(); err != nil {
		t.Fatal(err)
	}
}

// Stop shuts the server down and waits until it is gone. It is idempotent.
func (n *NATS) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv == nil {
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	n.srv = nil
}

func runNATS(port int, storeDir, conf string) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "s3csi-test",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true,
		NoLog:      true,
	}
	if conf != "" {
		var err error
		if opts, err = confOptions(port, storeDir, conf); err != nil {
			return nil, err
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("create NATS server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(natsReadyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("start NATS server on port %d: not ready after %s", port, natsReadyTimeout)
	}
	return srv, nil
}

// confOptions are the options of a server configured by a file holding conf, beside storeDir.
func confOptions(port int, storeDir, conf string) (*server.Options, error) {
	path := filepath.Join(storeDir, "nats.conf")
	text := fmt.Sprintf("server_name: s3csi-test\nlisten: %q\njetstream {\n  store_dir: %q\n}\n%s\n",
		net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), filepath.Join(storeDir, "jetstream"), conf)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return nil, fmt.Errorf("write NATS config: %w", err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("load NATS config: %w", err)
	}
	opts.NoSigs, opts.NoLog = true, true
	return opts, nil
}
