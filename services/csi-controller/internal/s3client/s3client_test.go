package s3client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/csi-controller/internal/s3client"
)

func TestValidateEndpointURL(t *testing.T) {
	tests := []struct {
		name  string
		url   string
		valid bool
	}{
		{"an https URL with a port is valid", "https://s3.example.com:8443", true},
		{"an http URL is valid", "http://127.0.0.1:9000", true},
		{"an empty URL is refused", "", false},
		{"a URL without a scheme is refused", "s3.example.com", false},
		{"a URL without a host is refused", "https://", false},
		{"another scheme is refused", "ftp://s3.example.com", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s3client.ValidateEndpointURL(tt.url); (err == nil) != tt.valid {
				t.Errorf("ValidateEndpointURL(%q) = %v, want valid=%v", tt.url, err, tt.valid)
			}
		})
	}
}

func TestNewSignsRequestsVersitygwAccepts(t *testing.T) {
	srv := testenv.StartS3(t)
	ep := s3client.Endpoint{URL: srv.Endpoint, Region: srv.Region, PathStyle: true}
	hc, err := s3client.NewHTTPClient(ep)
	if err != nil {
		t.Fatal(err)
	}
	good, err := s3client.New(ep, "", s3client.Credentials{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}, hc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.ListBuckets(t.Context(), &s3.ListBucketsInput{}); err != nil {
		t.Errorf("ListBuckets with the right key = %v", err)
	}
	bad, err := s3client.New(ep, "", s3client.Credentials{AccessKeyID: srv.AccessKey, SecretAccessKey: "wrong"}, hc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.ListBuckets(t.Context(), &s3.ListBucketsInput{}); err == nil {
		t.Error("ListBuckets with a wrong secret succeeded, want a signature error")
	}
}

func TestNewRefusesMissingCredentials(t *testing.T) {
	_, err := s3client.New(s3client.Endpoint{URL: "http://127.0.0.1:1"}, "", s3client.Credentials{AccessKeyID: "AK"}, http.DefaultClient)
	if err == nil {
		t.Error("New() without a secret key succeeded")
	}
}

func TestHTTPClientTrustsTheCABundle(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	srv.StartTLS()
	defer srv.Close()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	get := func(ep s3client.Endpoint) error {
		hc, err := s3client.NewHTTPClient(ep)
		if err != nil {
			return err
		}
		hc.Transport.(*http.Transport).DisableKeepAlives = true
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	if err := get(s3client.Endpoint{URL: srv.URL, CABundle: bundle}); err != nil {
		t.Errorf("GET with the CA bundle = %v, want success", err)
	}
	if err := get(s3client.Endpoint{URL: srv.URL}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("GET without the CA bundle = %v, want a certificate error", err)
	}
	other := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(other, selfSigned(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := get(s3client.Endpoint{URL: srv.URL, CABundle: other}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("GET with an unrelated CA bundle = %v, want a certificate error", err)
	}
}

func TestNewHTTPClientRefusesABundleWithoutCertificates(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"a missing file": filepath.Join(dir, "missing.pem"), "a file without PEM": empty} {
		t.Run(name+" is refused", func(t *testing.T) {
			if _, err := s3client.NewHTTPClient(s3client.Endpoint{URL: "https://x", CABundle: path}); err == nil {
				t.Error("NewHTTPClient() succeeded")
			}
		})
	}
}

// selfSigned returns a PEM certificate that did not sign the test server's.
func selfSigned(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "x"}, NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
