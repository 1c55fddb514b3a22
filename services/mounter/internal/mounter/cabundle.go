package mounter

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/s3csi/s3csi/shared/cabundle"
)

// systemBundles are where Linux distributions keep the system's CA bundle; SSL_CERT_FILE, when
// set, comes first, as for Go's own TLS.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",             // openSUSE
	"/etc/ssl/cert.pem",                  // Alpine, macOS
}

// maxSystemBundle bounds the system bundle copied in front of the driver's CA (a full Mozilla
// store is about 220 KiB).
const maxSystemBundle = 4 << 20

// writeCABundle writes the file a mount-s3 child reads as AWS_CA_BUNDLE into the mounter's own
// temporary dir (never the comm dir, which the node reads) and returns its path: the system
// bundle, when the image has one, then the driver's CA.
//
// Problem: mount-s3 takes its bundle as the whole trust store, while the driver's CA is trusted
// in addition to the system roots (the built-in engine's client adds it to them).
// Solution: the file holds both.
func writeCABundle(ca []byte) (string, error) {
	if _, err := cabundle.Parse(ca); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if sys := systemBundle(); len(sys) > 0 {
		buf.Write(sys)
		if !bytes.HasSuffix(sys, []byte("\n")) {
			buf.WriteByte('\n')
		}
	}
	buf.Write(ca)
	dir := filepath.Join(os.TempDir(), "s3csi-ca")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("write the CA bundle for mount-s3: %w", err)
	}
	path := filepath.Join(dir, "ca-bundle.pem")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("write the CA bundle for mount-s3: %w", err)
	}
	return path, nil
}

// systemBundle returns the first system CA bundle found, nil when the image has none.
func systemBundle() []byte {
	paths := systemBundles
	if env := os.Getenv("SSL_CERT_FILE"); env != "" {
		paths = append([]string{env}, paths...)
	}
	for _, p := range paths {
		f, err := os.Open(p) //nolint:gosec // fixed system paths, or the process's SSL_CERT_FILE
		if err != nil {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(f, maxSystemBundle))
		_ = f.Close()
		if err == nil && len(data) > 0 {
			return data
		}
	}
	return nil
}

// tlsUntrusted reports whether mount-s3's error output says the endpoint's certificate was not
// verified. mount-s3's TLS library (s2n, through the AWS CRT) reports it as a failed TLS
// negotiation, or with the certificate named; nothing finer reaches the output.
func tlsUntrusted(out string) bool {
	o := strings.ToLower(out)
	return strings.Contains(o, "tls") && (strings.Contains(o, "negotiation") || strings.Contains(o, "certificate"))
}
