package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	b64 "encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki writes the cluster's certificates once: a CA, the API server's and kubelet's serving
// certificates, one admin client certificate (system:masters) that every host component and the
// user's kubectl use, and the service-account signing key. An existing directory is reused, so a
// kubeconfig handed out earlier stays valid.
func (c Config) pki() error {
	dir := c.pkiDir()
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pki dir: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "s3csi-cluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("parse CA certificate: %w", err)
	}
	if err := writeCert(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.IP(c.NodeIP().AsSlice()), net.IP(c.KubernetesServiceIP().AsSlice())}
	leaves := []struct {
		name  string
		cn    string
		org   []string
		dns   []string
		usage []x509.ExtKeyUsage
	}{
		{"apiserver", "kube-apiserver", nil, []string{
			"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{"kubelet", "system:node:" + c.NodeName, []string{"system:nodes"}, []string{"localhost", c.NodeName},
			[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		{"admin", "s3csi-cluster-admin", []string{"system:masters"}, nil,
			[]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	}
	for i, l := range leaves {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("generate %s key: %w", l.name, err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)),
			Subject:      pkix.Name{CommonName: l.cn, Organization: l.org},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().AddDate(10, 0, 0),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  l.usage,
		}
		if l.dns != nil {
			tmpl.DNSNames, tmpl.IPAddresses = l.dns, ips
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("create %s certificate: %w", l.name, err)
		}
		if err := writeCert(dir, l.name, der, key); err != nil {
			return err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return fmt.Errorf("marshal service-account public key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return fmt.Errorf("write service-account public key: %w", err)
	}
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "done"), nil, 0o600)
}

// s3PKI writes, once, the S3 server's own CA (s3-ca.crt, apart from the cluster's CA: it plays
// an on-premises endpoint's private CA) and versitygw's serving certificate for the node's
// address (s3.crt). A state dir made before the S3 server served HTTPS gets them at the next up.
func (c Config) s3PKI() error {
	dir := c.pkiDir()
	if _, err := os.Stat(filepath.Join(dir, "s3.crt")); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pki dir: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate S3 CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "s3csi-cluster-s3-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("create S3 CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("parse S3 CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate S3 key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "s3csi-cluster-s3"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.IP(c.NodeIP().AsSlice())},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("create S3 certificate: %w", err)
	}
	// The CA first: s3.crt is the marker that both exist.
	if err := writeCert(dir, "s3-ca", caDER, caKey); err != nil {
		return err
	}
	return writeCert(dir, "s3", der, key)
}

func writeCert(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("write %s certificate: %w", name, err)
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal key %s: %w", path, err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	return nil
}

// writeKubeconfig writes the admin kubeconfig, with the certificates embedded so it can be
// copied elsewhere.
func (c Config) writeKubeconfig() error {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(c.pkiDir(), name))
		if err != nil {
			return "", fmt.Errorf("read %s: %w", name, err)
		}
		return base64(b), nil
	}
	ca, err1 := read("ca.crt")
	crt, err2 := read("admin.crt")
	key, err3 := read("admin.key")
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: s3csi
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority-data: %s
users:
- name: admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: s3csi
  context: {cluster: s3csi, user: admin}
current-context: s3csi
`, c.APIServerPort, ca, crt, key)
	if err := os.WriteFile(c.Kubeconfig(), []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

func base64(b []byte) string { return b64.StdEncoding.EncodeToString(b) }
