package cabundle

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/testenv"
)

// testCA is a CA that signs a server certificate for 127.0.0.1.
type testCA struct {
	pem    []byte
	server tls.Certificate
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	ca, err := testenv.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	return testCA{pem: ca.PEM, server: ca.Server}
}

func TestParse(t *testing.T) {
	a, b := newTestCA(t), newTestCA(t)
	cases := []struct {
		name    string
		data    []byte
		certs   int
		wantErr string
	}{
		{name: "one certificate is accepted", data: a.pem, certs: 1},
		{name: "two certificates with white space around are accepted", data: append(append([]byte("\n"), a.pem...), append(b.pem, "\n\n"...)...), certs: 2},
		{name: "an empty bundle is refused", data: nil, wantErr: "no PEM certificate"},
		{name: "text that is no PEM is refused", data: []byte("ca.pem"), wantErr: "not a PEM certificate"},
		{name: "a private key is refused", data: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}), wantErr: `type "PRIVATE KEY"`},
		{name: "a certificate block that does not parse is refused", data: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}), wantErr: "certificate 1"},
		{name: "text after the certificates is refused", data: append(bytes.Clone(a.pem), "trailing"...), wantErr: "not a PEM certificate"},
		{name: "a bundle over the size bound is refused", data: bytes.Repeat(a.pem, MaxSize/len(a.pem)+1), wantErr: "exceed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			certs, err := Parse(tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(certs) != tc.certs {
				t.Fatalf("Parse = %d certificates, %v; want %d", len(certs), err, tc.certs)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	a := newTestCA(t)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.pem"), filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(good, a.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(good); err != nil || !bytes.Equal(data, a.pem) {
		t.Errorf("ReadFile(good) = %d bytes, %v", len(data), err)
	}
	if _, err := ReadFile(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("ReadFile(bad) error = %v, want one naming the file", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile(missing) error = %v, want not exist", err)
	}
}

// TestUntrustedCertificatesAreExplained makes real TLS requests to a server whose certificate
// a private CA signed: without the CA the error is explained naming the chart value; with the
// CA's pool the request succeeds.
func TestUntrustedCertificatesAreExplained(t *testing.T) {
	ca := newTestCA(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.server}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	get := func(pool *x509.CertPool) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		resp, err := c.Get(srv.URL)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}

	err := get(nil)
	if err == nil || !Untrusted(err) {
		t.Fatalf("a request without the CA: error %v, want an untrusted certificate", err)
	}
	explained := Explain(fmt.Errorf("list bucket: %w", err))
	for _, want := range []string{"not trusted", ChartValue, "unknown authority"} {
		if !strings.Contains(explained.Error(), want) {
			t.Errorf("explained error %q does not say %q", explained, want)
		}
	}
	if !Untrusted(explained) {
		t.Error("the explained error no longer unwraps to the certificate error")
	}

	pool, err := Pool(ca.pem)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(pool); err != nil {
		t.Fatalf("a request trusting the CA: %v", err)
	}
	if other := Explain(errors.New("connection refused")); other.Error() != "connection refused" {
		t.Errorf("Explain changed an unrelated error: %v", other)
	}
	if Explain(nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
}
