package command

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/testenv"
)

// oneLineError checks that a failed run says, on one line of stderr, each of want.
func oneLineError(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if code == ExitFailure && len(lines) != 1 {
		t.Errorf("stderr has %d lines, want one:\n%s", len(lines), r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("error %q does not say %q", lines[0], w)
		}
	}
	if r.stdout != "" {
		t.Errorf("stdout is not empty after an error:\n%s", r.stdout)
	}
}

func TestEventsFailsClearlyWhenNATSIsNotUsable(t *testing.T) {
	isolate(t)
	t.Run("NATS unreachable", func(t *testing.T) {
		srv := testenv.StartNATS(t)
		url := srv.URL()
		srv.Stop()
		oneLineError(t, run(t, "events", "--nats-url", url), ExitFailure,
			"cannot reach NATS at "+url, "port-forward svc/s3csi-nats 4222", "--nats-url")
	})
	t.Run("the stream is absent", func(t *testing.T) {
		srv := testenv.StartNATS(t)
		oneLineError(t, run(t, "events", "--nats-url", srv.URL()), ExitFailure,
			"the stream S3CSI_EVENTS does not exist on the NATS at "+srv.URL())
	})
	t.Run("the stream is absent, following", func(t *testing.T) {
		srv := testenv.StartNATS(t)
		oneLineError(t, run(t, "events", "-f", "--nats-url", srv.URL()), ExitFailure, "does not exist")
	})
	t.Run("a NATS that serves TLS with a certificate of an unknown CA", func(t *testing.T) {
		certFile, keyFile := selfSignedCertificate(t)
		srv := testenv.StartNATSConf(t, fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n}\n", certFile, keyFile))
		oneLineError(t, run(t, "events", "--nats-url", srv.URL()), ExitFailure,
			"serves TLS with a certificate this client does not trust", "--nats-tls-ca-file", "s3csi-nats-tls")
	})
	t.Run("a NATS URL that is not one", func(t *testing.T) {
		oneLineError(t, run(t, "events", "--nats-url", "http://127.0.0.1:4222"), ExitUsage, "--nats-url")
	})
}

func TestAuthentication(t *testing.T) {
	isolate(t)
	b := newAuthBus(t)
	seq := b.publish(t, &eventspb.WorkloadScheduled{Node: "node-1", PodNamespace: "default", PodName: "web-0", PodUid: uidWeb})
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("without credentials the connection is refused", func(t *testing.T) {
		oneLineError(t, run(t, "events", "--nats-url", b.url), ExitFailure,
			"refused the connection without a user", "--nats-user audit", "s3csi-nats-auth")
	})
	t.Run("with a wrong password the connection is refused", func(t *testing.T) {
		oneLineError(t, run(t, "events", "--nats-url", b.url, "--nats-user", "audit", "--nats-password-file", wrong),
			ExitFailure, `refused the connection as user "audit"`)
	})
	t.Run("a user without its password file is a usage error", func(t *testing.T) {
		oneLineError(t, run(t, "events", "--nats-url", b.url, "--nats-user", "audit"), ExitUsage,
			"--nats-user and --nats-password-file: set both or neither")
	})
	for _, user := range []events.Service{events.UserAudit, events.UserReplay} {
		t.Run("the "+string(user)+" user reads the events", func(t *testing.T) {
			r := run(t, append([]string{"events", "-o", "json"}, b.as(user)...)...)
			if r.code != ExitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got := seqs(jsonRecords(t, r.stdout)); len(got) != 1 || got[0] != seq {
				t.Fatalf("read %v, want [%d]", got, seq)
			}
		})
	}
	t.Run("the credentials are read from the environment as the services read them", func(t *testing.T) {
		t.Setenv("NATS_URL", b.url)
		t.Setenv("NATS_USER", "audit")
		t.Setenv("NATS_PASSWORD_FILE", b.passwords[events.UserAudit])
		if r := run(t, "events"); r.code != ExitOK {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
	})
	t.Run("a service's user may not read the stream", func(t *testing.T) {
		oneLineError(t, run(t, append([]string{"events"}, b.as(events.ServicePodReconciler)...)...), ExitFailure,
			`NATS denied user "pod-reconciler" a request`)
	})
}

func TestUsageErrors(t *testing.T) {
	isolate(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: []string{"events", "--type", "volume.resized"}, want: `unknown event type "volume.resized"`},
		{args: []string{"events", "-o", "wide"}, want: `-o "wide"`},
		{args: []string{"events", "--since", "1h", "--from-seq", "3"}, want: "--since and --from-seq"},
		{args: []string{"events", "--pod", "a/b/c"}, want: "--pod"},
		{args: []string{"events", "--node", "Node_1"}, want: "--node"},
		{args: []string{"events", "--no-such-flag"}, want: "unknown flag: --no-such-flag"},
		{args: []string{"events", "extra"}, want: "unknown command"},
		{args: []string{"status", "-o", "wide"}, want: `-o "wide"`},
		{args: []string{"replay", "--to-prefix", "s3csi.events"}, want: "add --live"},
		{args: []string{"replay", "--to-prefix", "s3csi.events.x", "--live"}, want: "under the live prefix"},
		{args: []string{"replay", "--to-prefix", "test.*"}, want: "--to-prefix"},
		{args: []string{"replay", "--to-prefix", "test.events"}, want: "--to-stream: name the stream"},
		{args: []string{"replay", "--live"}, want: "--live is only for"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := run(t, tc.args...)
			if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 saying %q", r.code, r.stderr, tc.want)
			}
		})
	}
}

func TestEveryCommandHasHelpWithAnExample(t *testing.T) {
	isolate(t)
	for _, cmd := range [][]string{{}, {"events"}, {"status"}, {"replay"}} {
		t.Run(strings.Join(append([]string{"kubectl s3csi"}, cmd...), " "), func(t *testing.T) {
			r := run(t, append(cmd, "--help")...)
			if r.code != ExitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			want := "kubectl s3csi " + strings.Join(cmd, " ")
			if !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, strings.TrimSpace(want)) {
				t.Errorf("help has no example of %q:\n%s", want, r.stdout)
			}
		})
	}
}

// selfSignedCertificate writes a certificate for 127.0.0.1 that no CA signed, and its key.
func selfSignedCertificate(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
