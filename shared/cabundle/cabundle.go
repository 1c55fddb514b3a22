// Package cabundle holds the CA bundle the driver trusts for the S3 endpoint's TLS certificate
// (the chart's s3.caBundle): its checks, the pool built from it, and the message an untrusted
// certificate gives.
//
// The csi-controller reads the bundle from a file, the node-agent from a file at each mount and
// sends it to the mounter in the mount request, and the mounter trusts it: one definition of
// what a valid bundle is serves all three, so the mounter refuses what the node-agent would.
package cabundle

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxSize bounds a bundle in bytes of PEM: about twenty certificates, the private CAs of an
// endpoint rather than a whole system store. It keeps a mount request within the handshake's
// frame size and matches the chart's schema (values.schema.json, s3.caBundle).
const MaxSize = 32 << 10

// ChartValue is the chart value that gives the bundle, named in every message that asks an
// operator to set or fix it.
const ChartValue = "s3.caBundle"

// Parse checks a bundle and returns its certificates: PEM CERTIFICATE blocks only, each a valid
// X.509 certificate, at least one, at most MaxSize bytes, nothing but white space around them.
func Parse(data []byte) ([]*x509.Certificate, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("parse CA bundle: %d bytes exceed %d", len(data), MaxSize)
	}
	var certs []*x509.Certificate
	rest := data
	for {
		block, next := pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("parse CA bundle: a PEM block of type %q, want only CERTIFICATE", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse CA bundle: certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, cert)
		rest = next
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("parse CA bundle: %d bytes that are not a PEM certificate", len(bytes.TrimSpace(rest)))
	}
	if len(certs) == 0 {
		return nil, errors.New("parse CA bundle: no PEM certificate")
	}
	return certs, nil
}

// ReadFile reads and checks the bundle at path (Parse), reading at most MaxSize+1 bytes.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path) //nolint:gosec // the operator's configured file
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read CA bundle %s: %w", path, err)
	}
	if _, err := Parse(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// Pool returns the system roots plus the certificates of data (Parse); with no system roots
// (a FROM-scratch image) only the bundle's.
func Pool(data []byte) (*x509.CertPool, error) {
	certs, err := Parse(data)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// Untrusted reports whether err, anywhere in its chain, is a TLS certificate that does not chain
// to a trusted CA: the endpoint's CA is missing from, or not the one in, the driver's bundle.
func Untrusted(err error) bool {
	// crypto/tls wraps it in a *tls.CertificateVerificationError, which unwraps to it.
	var unknown x509.UnknownAuthorityError
	return errors.As(err, &unknown)
}

// Hint is what an operator does about an untrusted certificate.
const Hint = "the S3 endpoint's TLS certificate is not trusted (its CA is not among the system roots nor in the driver's CA bundle): " +
	"give the driver the CA that signed it with the chart value " + ChartValue + " (helm --set-file " + ChartValue + "=ca.pem, or s3.caConfigMap)"

// Explain returns err with Hint in front when err is an untrusted certificate (Untrusted), else
// err unchanged.
func Explain(err error) error {
	if err == nil || !Untrusted(err) {
		return err
	}
	return fmt.Errorf("%s: %w", Hint, err)
}
