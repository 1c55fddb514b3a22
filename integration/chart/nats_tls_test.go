package chart

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/s3csi/s3csi/shared/events"
)

// The bundled NATS as the default rendering configures it (its nats.conf, the generated CA and
// certificate, the users), run as a real nats-server: the services' way in, TLS checked against
// the Secret's CA with their own password, works by the Service's name and by localhost (a
// port-forward); the server offers nothing in clear, and a client that does not trust the CA
// is refused.
func TestTheBundledNATSServesOnlyTLS(t *testing.T) {
	objs := render(t, "default")
	dir := t.TempDir()
	secret := find(objs, "Secret", "s3csi-nats-tls")
	if secret == nil {
		t.Fatal("no Secret s3csi-nats-tls")
	}
	data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
	files := map[string][]byte{}
	for _, key := range []string{"ca.crt", "tls.crt", "tls.key"} {
		b, err := base64.StdEncoding.DecodeString(data[key])
		if err != nil || len(b) == 0 {
			t.Fatalf("%s of s3csi-nats-tls: %d bytes, %v", key, len(b), err)
		}
		files[key] = b
		if err := os.WriteFile(filepath.Join(dir, key), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("the certificate names the Service and every server behind the headless Service, for servers and for routes", func(t *testing.T) {
		block, _ := pem.Decode(files["tls.crt"])
		if block == nil {
			t.Fatal("tls.crt holds no PEM block")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"s3csi-nats.s3csi-system.svc", "s3csi-nats-2.s3csi-nats-headless.s3csi-system.svc", "localhost"} {
			if err := cert.VerifyHostname(name); err != nil {
				t.Errorf("the certificate is not valid for %s: %v", name, err)
			}
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(files["ca.crt"])
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("the certificate does not verify against ca.crt for key usage %v: %v", usage, err)
			}
		}
	})

	port := startRenderedNATS(t, objs, dir)
	passwordFile := filepath.Join(dir, "node-agent.password")
	auth := find(objs, "Secret", "s3csi-nats-auth")
	authData, _, _ := unstructured.NestedStringMap(auth.Object, "data")
	pw, _ := base64.StdEncoding.DecodeString(authData["node-agent"])
	if err := os.WriteFile(passwordFile, pw, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("a service connects over TLS with the CA and its password, as the chart configures it", func(t *testing.T) {
		opts := events.Auth{User: "node-agent", PasswordFile: passwordFile, TLSCAFile: filepath.Join(dir, "ca.crt")}.Options()
		nc, err := nats.Connect("tls://localhost:"+strconv.Itoa(port), append(opts, nats.Timeout(5*time.Second))...)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
			t.Fatalf("create the stream over TLS: %v", err)
		}
	})
	t.Run("the Service's name is what the services check", func(t *testing.T) {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(files["ca.crt"])
		nc, err := events.Connect(ctx, "tls://127.0.0.1:"+strconv.Itoa(port), t.Name(), logr.Discard(),
			nats.Secure(&tls.Config{ServerName: "s3csi-nats.s3csi-system.svc", RootCAs: roots, MinVersion: tls.VersionTLS12}),
			nats.UserInfo("node-agent", string(pw)), nats.CustomInboxPrefix(events.InboxPrefix(events.ServiceNodeAgent)),
			nats.RetryOnFailedConnect(false))
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		nc.Close()
	})
	t.Run("a client that does not trust the CA is refused", func(t *testing.T) {
		nc, err := nats.Connect("tls://localhost:"+strconv.Itoa(port), nats.UserInfo("node-agent", string(pw)), nats.Timeout(5*time.Second))
		if err == nil {
			nc.Close()
			t.Fatal("connected without the CA")
		}
	})
	t.Run("the server offers no connection in clear", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		info, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			t.Fatalf("read the server's INFO: %v", err)
		}
		if !strings.Contains(info, `"tls_required":true`) {
			t.Errorf("the server's INFO does not require TLS: %s", info)
		}
	})
}

// startRenderedNATS runs nats-server with the rendered nats.conf, its paths moved under dir and
// its ports to free loopback ones, the password variables set from the rendered auth Secret,
// and returns the client port.
func startRenderedNATS(t *testing.T, objs []*unstructured.Unstructured, dir string) int {
	t.Helper()
	conf, _, _ := unstructured.NestedString(find(objs, "ConfigMap", "s3csi-nats").Object, "data", "nats.conf")
	for old, repl := range map[string]string{
		"/etc/nats-tls/":   dir + "/",
		"store_dir: /data": "store_dir: " + filepath.Join(dir, "js"),
		"port: 4222":       "host: 127.0.0.1\nport: -1",
		"http_port: 8222":  "",
	} {
		if !strings.Contains(conf, old) {
			t.Fatalf("the rendered nats.conf has no %q:\n%s", old, conf)
		}
		conf = strings.ReplaceAll(conf, old, repl)
	}
	auth := find(objs, "Secret", "s3csi-nats-auth")
	data, _, _ := unstructured.NestedStringMap(auth.Object, "data")
	for _, s := range events.Users() {
		pw, _ := base64.StdEncoding.DecodeString(data[string(s)])
		t.Setenv(events.PasswordVariable(s), string(pw))
	}
	t.Setenv("POD_NAME", "s3csi-nats-0")
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("load the rendered nats.conf: %v", err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("create NATS server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("listener address %v is not TCP", srv.Addr())
	}
	return addr.Port
}
