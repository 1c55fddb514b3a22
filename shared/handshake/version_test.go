package handshake

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/cabundle"
)

func testCAPEM(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ring CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestRequestVersions(t *testing.T) {
	ca := testCAPEM(t)
	base := func(mod func(*Request)) *Request {
		r := &Request{Bucket: "b", MaxRead: 1 << 20}
		mod(r)
		return r
	}
	cases := []struct {
		name    string
		req     *Request
		wantErr string
	}{
		{name: "a version 1 request without a CA bundle is accepted", req: base(func(r *Request) { r.Version = Version })},
		{name: "a version 2 request with a CA bundle is accepted", req: base(func(r *Request) { r.Version, r.CaBundle = VersionCABundle, ca })},
		{name: "a version 2 request without a CA bundle is accepted", req: base(func(r *Request) { r.Version = VersionCABundle })},
		{name: "a version 1 request cannot carry a CA bundle", req: base(func(r *Request) { r.Version, r.CaBundle = Version, ca }),
			wantErr: "version 1 request, which cannot carry one"},
		{name: "a version this side does not speak is refused", req: base(func(r *Request) { r.Version = MaxVersion + 1 }),
			wantErr: "protocol version 3"},
		{name: "version 0 is refused", req: base(func(*Request) {}), wantErr: "protocol version 0"},
		{name: "a CA bundle that is not PEM certificates is refused", req: base(func(r *Request) { r.Version, r.CaBundle = VersionCABundle, []byte("-----BEGIN CERTIFICATE-----\nxx") }),
			wantErr: "parse CA bundle"},
		{name: "a CA bundle over the size bound is refused", req: base(func(r *Request) {
			r.Version, r.CaBundle = VersionCABundle, []byte(strings.Repeat(string(ca), cabundle.MaxSize/len(ca)+1))
		}), wantErr: "exceed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateRequest(tc.req)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateRequest: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ValidateRequest error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestARequestIsSentWithTheLowestVersionThatCarriesIt(t *testing.T) {
	if v := RequestVersion(&Request{Bucket: "b"}); v != Version {
		t.Errorf("a request without a CA bundle is sent as version %d, want %d: mounters of version 1 would refuse it", v, Version)
	}
	if v := RequestVersion(&Request{Bucket: "b", CaBundle: testCAPEM(t)}); v != VersionCABundle {
		t.Errorf("a request with a CA bundle is sent as version %d, want %d: a version 1 mounter would mount without the CA", v, VersionCABundle)
	}
	// The largest bundle still fits in one frame, with room for the rest of a request.
	ca := testCAPEM(t)
	bundle := []byte(strings.Repeat(string(ca), cabundle.MaxSize/len(ca)))
	req := &Request{Version: VersionCABundle, Bucket: strings.Repeat("b", 63), CaBundle: bundle, Args: make([]string, 64), MaxRead: 1}
	for i := range req.Args {
		req.Args[i] = "--" + strings.Repeat("x", 100)
	}
	if _, err := EncodeFrame(req); err != nil {
		t.Errorf("a request with the largest CA bundle does not fit a frame: %v", err)
	}
}
