package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
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

// InstallChart installs charts/s3csi (or upgrades the release) with the cluster's S3 server and
// the driver credentials in a Secret, and waits until every workload of the release is ready.
// extra are more `helm upgrade` arguments (e.g. --set image.tag=...).
func (c Config) InstallChart(ctx context.Context, logf func(string, ...any), extra ...string) error {
	if _, err := os.Stat(c.Helm()); err != nil {
		return fmt.Errorf("helm is not built: run `make tools` (%w)", err)
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
	args := append([]string{
		"upgrade", "--install", ReleaseName, filepath.Join(c.RepoRoot, "charts", "s3csi"),
		"--kubeconfig", c.Kubeconfig(), "--namespace", ReleaseNamespace,
		"--set", "s3.endpointUrl=" + c.S3Endpoint(),
		// The endpoint's private CA, as an operator gives it (a later --set-file replaces it).
		"--set-file", "s3.caBundle=" + c.S3CAFile(),
		"--set", "s3CredentialSecret.name=" + CredentialSecret,
		// The single-node cluster has no storage provisioner: JetStream keeps its store in an
		// emptyDir there.
		"--set", "nats.jetstream.persistence=false",
		"--wait", "--timeout", "5m",
	}, extra...)
	cmd := exec.CommandContext(ctx, c.Helm(), args...)
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("helm %s: %w:\n%s", strings.Join(args[:3], " "), err, out.String())
	}
	if err := c.restartOnNewImages(ctx, logf); err != nil {
		return err
	}
	logf("chart installed (release %s in namespace %s) in %v", ReleaseName, ReleaseNamespace, time.Since(t).Round(100*time.Millisecond))
	return nil
}

// restartOnNewImages restarts the release's workloads when the images loaded into the cluster
// changed since the last install.
//
// Problem: a rebuilt image keeps its tag (the chart's appVersion), so `helm upgrade` sees an
// unchanged pod template and the running pods keep the old binaries.
// Solution: remember the content of the loaded images at each install; when it differs, roll
// the release's Deployments, DaemonSet and StatefulSet and wait for them.
// Invariant: after InstallChart, every pod of the release runs the images last loaded.
func (c Config) restartOnNewImages(ctx context.Context, logf func(string, ...any)) error {
	records, err := filepath.Glob(filepath.Join(c.StateDir, "images", "*.sha256"))
	if err != nil {
		return fmt.Errorf("list loaded images: %w", err)
	}
	h := sha256.New()
	for _, r := range records { // Glob sorts.
		b, err := os.ReadFile(r)
		if err != nil {
			return fmt.Errorf("read loaded image record: %w", err)
		}
		fmt.Fprintf(h, "%s %s\n", filepath.Base(r), b)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	marker := filepath.Join(c.StateDir, "installed-images")
	old, err := os.ReadFile(marker)
	if err == nil && string(old) != sum {
		logf("images changed since the last install: restarting the release's workloads")
		if err := c.kubectlQuiet(ctx, "-n", ReleaseNamespace, "rollout", "restart", "deployment,daemonset,statefulset"); err != nil {
			return err
		}
		if err := c.kubectlQuiet(ctx, "-n", ReleaseNamespace, "rollout", "status", "deployment,daemonset,statefulset", "--timeout=5m"); err != nil {
			return err
		}
	}
	if err := os.WriteFile(marker, []byte(sum), 0o644); err != nil {
		return fmt.Errorf("record installed images: %w", err)
	}
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
