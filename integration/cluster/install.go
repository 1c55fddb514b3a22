package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Release names where the chart is installed on the cluster.
const (
	ReleaseName      = "s3csi"
	ReleaseNamespace = "s3csi"
	// CredentialSecret holds the driver's S3 credentials (the chart's s3CredentialSecret.name).
	CredentialSecret = "s3-secret"
)

// Helm is the pinned helm binary (make tools).
func (c Config) Helm() string { return filepath.Join(c.RepoRoot, "bin", "helm") }

// InstallChart installs the chart from the cluster's registry (or upgrades the release), as an
// operator installs it from theirs: the images of the last Push, by name from the registry, the
// cluster's S3 server and the driver credentials in a Secret. It waits until every workload of
// the release is ready. extra are more `helm upgrade` arguments (e.g. --set image.tag=...).
func (c Config) InstallChart(ctx context.Context, logf func(string, ...any), extra ...string) error {
	version, err := c.chartVersion()
	if err != nil {
		return err
	}
	return c.install(ctx, logf, []string{c.ChartRef(), "--version", version, "--plain-http"}, extra)
}

// InstallChartDir is InstallChart with the chart in dir instead of the registry's, e.g. the chart
// of an earlier version, with the same values and the images of the last Push.
func (c Config) InstallChartDir(ctx context.Context, logf func(string, ...any), dir string, extra ...string) error {
	return c.install(ctx, logf, []string{dir}, extra)
}

// install runs `helm upgrade --install` of chart (a reference and its flags) with the cluster's
// values, then extra.
func (c Config) install(ctx context.Context, logf func(string, ...any), chart, extra []string) error {
	if _, err := os.Stat(c.Helm()); err != nil {
		return fmt.Errorf("helm is not built: run `make tools` (%w)", err)
	}
	tag, err := c.ReleaseTag()
	if err != nil {
		return err
	}
	t := time.Now()
	secret := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Secret
metadata: {name: %[2]s, namespace: %[1]s}
stringData: {access_key_id: %[3]q, secret_access_key: %[4]q}
`, ReleaseNamespace, CredentialSecret, c.S3AccessKey, c.S3SecretKey)
	var out strings.Builder
	apply := exec.CommandContext(ctx, c.bin("kubectl"), "--kubeconfig", c.Kubeconfig(), "apply", "-f", "-")
	apply.Stdin, apply.Stdout, apply.Stderr = strings.NewReader(secret), &out, &out
	if err := apply.Run(); err != nil {
		return fmt.Errorf("create the credentials Secret: %w: %s", err, out.String())
	}
	args := append(append([]string{"upgrade", "--install", ReleaseName}, chart...),
		"--kubeconfig", c.Kubeconfig(), "--namespace", ReleaseNamespace,
		"--set", "image.registry="+c.RegistryHost(), "--set", "image.tag="+tag,
		"--set", "s3.endpointUrl="+c.S3Endpoint(),
		// The endpoint's private CA, as an operator gives it (a later --set-file replaces it).
		"--set-file", "s3.caBundle="+c.S3CAFile(),
		"--set", "s3CredentialSecret.name="+CredentialSecret,
		// The single-node cluster has no storage provisioner: JetStream keeps its store in an
		// emptyDir there.
		"--set", "nats.jetstream.persistence=false",
		"--wait", "--timeout", "5m")
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, c.Helm(), args...)
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("helm %s: %w:\n%s", strings.Join(args[:3], " "), err, out.String())
	}
	logf("chart installed (release %s in namespace %s) in %v", ReleaseName, ReleaseNamespace, time.Since(t).Round(100*time.Millisecond))
	return nil
}

// S3Client is a client of the cluster's S3 server with its root credentials, trusting its CA.
func (c Config) S3Client() *s3.Client {
	o := s3.Options{
		BaseEndpoint: aws.String(c.S3Endpoint()),
		Region:       "us-east-1",
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(c.S3AccessKey, c.S3SecretKey, ""),
	}
	if ca, err := os.ReadFile(c.S3CAFile()); err == nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		o.HTTPClient = &http.Client{Transport: &http.Transport{
			Proxy:           http.ProxyFromEnvironment,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}}
	}
	return s3.New(o)
}

// MakeBucket creates a bucket on the cluster's S3 server unless it exists, and writes the object
// key with text in it when key is not empty.
func (c Config) MakeBucket(ctx context.Context, name, key, text string) error {
	s3c := c.S3Client()
	if _, err := s3c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(name)}); err != nil {
		if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	if key == "" {
		return nil
	}
	if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(name), Key: aws.String(key), Body: strings.NewReader(text)}); err != nil {
		return fmt.Errorf("put object %s/%s: %w", name, key, err)
	}
	return nil
}

// AddS3User gives versitygw a user with the given keys and the admin role (every bucket), as an
// operator issues a new key.
func (c Config) AddS3User(ctx context.Context, accessKey, secretKey string) error {
	return c.s3Admin(ctx, "create-user", "--access", accessKey, "--secret", secretKey, "--role", "admin")
}

// DeleteS3User revokes a user's key.
func (c Config) DeleteS3User(ctx context.Context, accessKey string) error {
	return c.s3Admin(ctx, "delete-user", "--access", accessKey)
}

// s3Admin runs versitygw's admin command against the cluster's server as root. The user's
// secret key is on the command line of this short-lived child only; root's keys travel in its
// environment.
func (c Config) s3Admin(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.RepoRoot, "bin", "versitygw"), append([]string{"admin", "--er", c.S3Endpoint()}, args...)...)
	cmd.Env = append(os.Environ(), "ADMIN_ACCESS_KEY_ID="+c.S3AccessKey, "ADMIN_SECRET_ACCESS_KEY="+c.S3SecretKey,
		// The server's CA, for Go's TLS and for the AWS SDK, whichever the admin client uses.
		"SSL_CERT_FILE="+c.S3CAFile(), "AWS_CA_BUNDLE="+c.S3CAFile())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("versitygw admin %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}
