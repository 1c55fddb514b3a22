package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a private CA for tests and a server certificate it signed for 127.0.0.1 and localhost.
type CA struct {
	// PEM is the CA's certificate, the bundle a client trusts.
	PEM []byte
	// Server is the server certificate with its key, for a tls.Config.
	Server tls.Certificate
	// ServerPEM and ServerKeyPEM are Server encoded, for a server that reads files.
	ServerPEM, ServerKeyPEM []byte
}

// NewCA makes a CA and a server certificate it signs for 127.0.0.1 and localhost, valid for a
// day.
func NewCA() (*CA, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the test CA: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "s3csi test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("make the test CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("make the test CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the test server's key: %w", err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "s3csi test server"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("make the test server's certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode the test server's key: %w", err)
	}
	return &CA{
		PEM:          pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Server:       tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		ServerPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		ServerKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// writeServerCertificate makes a CA (NewCA), writes its server certificate and key into dir,
// and returns them as an S3's CAPEM, certFile and keyFile.
func writeServerCertificate(dir string) (*S3, error) {
	ca, err := NewCA()
	if err != nil {
		return nil, err
	}
	out := &S3{
		CAPEM:    ca.PEM,
		certFile: filepath.Join(dir, "s3-tls.crt"),
		keyFile:  filepath.Join(dir, "s3-tls.key"),
	}
	if err := os.WriteFile(out.certFile, ca.ServerPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write the S3 server's certificate: %w", err)
	}
	if err := os.WriteFile(out.keyFile, ca.ServerKeyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write the S3 server's key: %w", err)
	}
	return out, nil
}
