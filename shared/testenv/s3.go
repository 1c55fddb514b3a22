package testenv

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3 is a versitygw server with the posix backend, run as a child process: it checks SigV4, and
// its objects are plain files under Dir/<bucket>/ that tests can inspect.
type S3 struct {
	// Endpoint is the server URL, e.g. http://127.0.0.1:39211.
	Endpoint string
	// Region is the region clients sign for.
	Region string
	// AccessKey and SecretKey are the root credentials of the server.
	AccessKey, SecretKey string
	// Bucket is a bucket created empty when the server started.
	Bucket string
	// Dir is the posix backend root.
	Dir string
	// CAPEM is the PEM of the CA that signed the server's certificate when it serves HTTPS
	// (StartS3TLS), nil otherwise; Client trusts it.
	CAPEM []byte

	// certFile and keyFile are the server's certificate and key when it serves HTTPS.
	certFile, keyFile string

	bin    string
	cmd    *exec.Cmd
	exited chan struct{}
	output *SyncBuffer
	err    error // set before exited is closed
}

// StartS3E starts versitygw (built by `make tools`) serving a posix root under dir, with random
// root credentials, and creates one empty bucket.
func StartS3E(ctx context.Context, dir string) (*S3, error) {
	return startS3(ctx, dir, false)
}

// StartS3TLSE is StartS3E with the server serving HTTPS only, its certificate (for 127.0.0.1)
// signed by a CA made for it alone (S3.CAPEM): a private CA, as an on-premises endpoint's.
func StartS3TLSE(ctx context.Context, dir string) (*S3, error) {
	return startS3(ctx, dir, true)
}

func startS3(ctx context.Context, dir string, withTLS bool) (*S3, error) {
	bin, err := toolPath("S3CSI_VERSITYGW", "versitygw")
	if err != nil {
		return nil, err
	}
	if err := requireExecutable(bin, "make tools"); err != nil {
		return nil, fmt.Errorf("find versitygw: %w", err)
	}
	root := filepath.Join(dir, "s3")
	if err := os.MkdirAll(root, 0o750); err != nil {
		return nil, fmt.Errorf("create S3 root: %w", err)
	}
	var tlsFiles *S3
	if withTLS {
		if tlsFiles, err = writeServerCertificate(dir); err != nil {
			return nil, err
		}
	}
	// A free port can be taken between choosing it and versitygw binding it: try a few.
	var lastErr error
	for range 3 {
		s, err := startVersitygw(ctx, bin, root, tlsFiles)
		if err == nil {
			if err := s.CreateBucket(ctx, "s3csi-test-"+randomHex(4)); err != nil {
				_ = s.Stop()
				return nil, err
			}
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// StartS3 starts an S3 server for the test and stops it when the test ends.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	return startS3T(t, StartS3E)
}

// StartS3TLS starts an S3 server serving HTTPS with a private CA (StartS3TLSE) for the test and
// stops it when the test ends.
func StartS3TLS(t testing.TB) *S3 {
	t.Helper()
	return startS3T(t, StartS3TLSE)
}

func startS3T(t testing.TB, start func(context.Context, string) (*S3, error)) *S3 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop S3 server: %v", err)
		}
	})
	return s
}

func startVersitygw(ctx context.Context, bin, root string, tlsFiles *S3) (*S3, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	scheme := "http://"
	if tlsFiles != nil {
		scheme = "https://"
	}
	s := &S3{
		Endpoint:  scheme + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Region:    "us-east-1",
		AccessKey: "S3CSI" + randomHex(8),
		SecretKey: randomHex(20),
		Dir:       root,
		bin:       bin,
	}
	if tlsFiles != nil {
		s.CAPEM, s.certFile, s.keyFile = tlsFiles.CAPEM, tlsFiles.certFile, tlsFiles.keyFile
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// start runs versitygw on s's address, root and credentials and waits until it listens.
func (s *S3) start(ctx context.Context) error {
	addr := strings.TrimPrefix(strings.TrimPrefix(s.Endpoint, "http://"), "https://")
	s.exited, s.output, s.err = make(chan struct{}), &SyncBuffer{}, nil
	args := []string{"--port", addr, "--quiet"}
	if s.certFile != "" {
		args = append(args, "--cert", s.certFile, "--key", s.keyFile)
	}
	// Credentials go through the environment, not argv, so they do not show in ps.
	s.cmd = exec.Command(s.bin, append(args, "posix", s.Dir)...) //nolint:gosec // the pinned tool
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	s.cmd.Stdout, s.cmd.Stderr = s.output, s.output
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	exited := s.exited
	go func() {
		s.err = s.cmd.Wait()
		close(exited)
	}()
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("start versitygw: exited (%w): %s", s.err, s.output.String())
		case <-ctx.Done():
			_ = s.Stop()
			return fmt.Errorf("start versitygw: not listening on %s: %w", addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Restart starts a stopped server again with the same address, credentials and objects, as an
// S3 endpoint coming back after an outage.
func (s *S3) Restart(ctx context.Context) error {
	select {
	case <-s.exited:
	default:
		return errors.New("restart versitygw: it is still running")
	}
	return s.start(ctx)
}

// Pid is the process ID of the running server (a benchmark pins it to its own CPUs).
func (s *S3) Pid() int { return s.cmd.Process.Pid }

// Client returns an S3 client for the server signed with the given credentials.
func (s *S3) Client(accessKey, secretKey string) *s3.Client {
	o := s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		Region:       s.Region,
		Credentials:  credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""),
		UsePathStyle: true,
	}
	if s.CAPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.CAPEM)
		o.HTTPClient = &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}}
	}
	return s3.New(o)
}

// RootClient returns an S3 client with the server's root credentials.
func (s *S3) RootClient() *s3.Client {
	return s.Client(s.AccessKey, s.SecretKey)
}

// CreateBucket creates a bucket and makes it the server's Bucket.
func (s *S3) CreateBucket(ctx context.Context, name string) error {
	if _, err := s.RootClient().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("create bucket %q: %w", name, err)
	}
	s.Bucket = name
	return nil
}

// Stop stops versitygw and waits for it to exit.
func (s *S3) Stop() error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop versitygw: %w", err)
	}
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("find free port: %v is not a TCP address", l.Addr())
	}
	return addr.Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
