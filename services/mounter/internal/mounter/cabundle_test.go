package mounter

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMountS3OutputOfAnUntrustedCertificateIsRecognized(t *testing.T) {
	for out, want := range map[string]bool{
		"Error: Failed to create S3 client: Client error: TLS (SSL) negotiation failed (AWS_IO_TLS_ERROR_NEGOTIATION_FAILURE)": true,
		"tls: failed to verify certificate: x509: certificate signed by unknown authority":                                     true,
		"Error: Failed to create S3 client: bucket does not exist":                                                             false,
		"Error: the certificate of the profile is missing":                                                                     false,
	} {
		if got := tlsUntrusted(out); got != want {
			t.Errorf("tlsUntrusted(%q) = %v, want %v", out, got, want)
		}
	}
}

func TestTheCABundleForMountS3HoldsTheDriversCA(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("SSL_CERT_FILE", "")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	path, err := writeCABundle(ca)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(path, os.TempDir()) {
		t.Errorf("the bundle is written to %s, outside the mounter's temporary dir", path)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("stat %s = %v, %v; want mode 0600", path, info, err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !strings.HasSuffix(string(data), string(ca)) {
		t.Fatalf("the bundle does not end with the driver's CA (%v)", err)
	}
	if _, err := writeCABundle([]byte("not a certificate")); err == nil {
		t.Error("a CA bundle that is not PEM certificates was written")
	}
}
