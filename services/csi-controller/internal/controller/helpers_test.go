package controller_test

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/csi-controller/internal/controller"
	"github.com/s3csi/s3csi/services/csi-controller/internal/metrics"
	"github.com/s3csi/s3csi/services/csi-controller/internal/proof"
	"github.com/s3csi/s3csi/services/csi-controller/internal/s3client"
)

const testPrefix = "csi-s3-"

// env is one versitygw and a Controller talking to it (directly, or through a proxy).
type env struct {
	s3      *testenv.S3
	ctrl    *controller.Controller
	metrics *metrics.Metrics
	reg     *prometheus.Registry
}

type envOption func(*controller.Config)

func withEndpoint(ep s3client.Endpoint) envOption {
	return func(c *controller.Config) { c.Endpoint = ep }
}

func withNotifier(n controller.Notifier) envOption {
	return func(c *controller.Config) { c.Notifier = n }
}

func withDriverCredentials(d controller.DriverCredentials) envOption {
	return func(c *controller.Config) { c.DriverCredentials = d }
}

// testKey is the ownership key of every test controller unless withOwnershipKeys replaces it:
// controllers of one test that share an S3 server act as one installation.
var testKey = []byte("0123456789abcdef0123456789abcdef")

func withOwnershipKeys(t testing.TB, keys ...[]byte) envOption {
	k, err := proof.NewKeys(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *controller.Config) { c.OwnershipKeys = k }
}

func newEnv(t *testing.T, srv *testenv.S3, opts ...envOption) *env {
	t.Helper()
	return newEnvTB(t, srv, opts...)
}

func newBenchEnv(b *testing.B) *env {
	b.Helper()
	return newEnvTB(b, nil)
}

func newEnvTB(t testing.TB, srv *testenv.S3, opts ...envOption) *env {
	t.Helper()
	if srv == nil {
		srv = testenv.StartS3(t)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	keys, err := proof.NewKeys(testKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := controller.Config{
		OwnershipKeys: keys,
		Endpoint:      s3client.Endpoint{URL: srv.Endpoint, Region: srv.Region, PathStyle: true},
		DriverCredentials: func() (s3client.Credentials, error) {
			return s3client.Credentials{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}, nil
		},
		CredentialsCacheTTL: time.Minute,
		BucketPrefix:        testPrefix,
		Metrics:             m,
	}
	for _, o := range opts {
		o(&cfg)
	}
	hc, err := s3client.NewHTTPClient(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hc.CloseIdleConnections)
	cfg.HTTPClient = hc
	ctrl, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{s3: srv, ctrl: ctrl, metrics: m, reg: reg}
}

func testContext(t *testing.T) context.Context {
	return logr.NewContext(t.Context(), testr.New(t))
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func createReq(name string, mods ...func(*csi.CreateVolumeRequest)) *csi.CreateVolumeRequest {
	r := &csi.CreateVolumeRequest{
		Name:               name,
		VolumeCapabilities: []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)},
	}
	for _, m := range mods {
		m(r)
	}
	return r
}

func withParams(p map[string]string) func(*csi.CreateVolumeRequest) {
	return func(r *csi.CreateVolumeRequest) { r.Parameters = p }
}

func withSecrets(s map[string]string) func(*csi.CreateVolumeRequest) {
	return func(r *csi.CreateVolumeRequest) { r.Secrets = s }
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error = %v, want code %s", err, code)
	}
}

// buckets lists the buckets of the server whose names start with prefix.
func buckets(t *testing.T, srv *testenv.S3, prefix string) []string {
	t.Helper()
	out, err := srv.RootClient().ListBuckets(t.Context(), &s3.ListBucketsInput{})
	if err != nil {
		t.Fatalf("list buckets: %v", err)
	}
	var names []string
	for _, b := range out.Buckets {
		if strings.HasPrefix(aws.ToString(b.Name), prefix) {
			names = append(names, aws.ToString(b.Name))
		}
	}
	return names
}

func putObject(t *testing.T, srv *testenv.S3, bucket, key string) {
	t.Helper()
	_, err := srv.RootClient().PutObject(t.Context(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("data"),
	})
	if err != nil {
		t.Fatalf("put object: %v", err)
	}
}

func bucketExists(t *testing.T, srv *testenv.S3, bucket string) bool {
	t.Helper()
	for _, b := range buckets(t, srv, "") {
		if b == bucket {
			return true
		}
	}
	return false
}

// proxy is a reverse proxy in front of versitygw that keeps the Host header (SigV4 signs it),
// optionally serves TLS, and can hold back the response to CreateBucket.
type proxy struct {
	URL string
	// delayCreate, when set, is how long the response to a CreateBucket waits after the
	// server handled it: the bucket exists, but a client with a shorter deadline never learns it.
	// Atomic: the handler of a request the client gave up on may still read it.
	delayCreate atomic.Int64
}

func startProxy(t *testing.T, target string, tlsConfig *tls.Config) *proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(u)
		r.Out.Host = r.In.Host
	}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isCreate := r.Method == http.MethodPut && r.URL.RawQuery == "" && strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 0
		delay := time.Duration(p.delayCreate.Load())
		if isCreate && delay > 0 {
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		rp.ServeHTTP(w, r)
	})
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are what some tests want
	if tlsConfig != nil {
		srv.TLS = tlsConfig
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// testCA generates a CA and a certificate it signed for 127.0.0.1 (testenv.NewCA), and writes
// the CA to a PEM file; it returns the server's TLS config and the path of the CA bundle.
func testCA(t *testing.T) (*tls.Config, string) {
	t.Helper()
	ca, err := testenv.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.Server}}, bundle
}
