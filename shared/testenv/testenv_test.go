package testenv_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/testenv"
)

func TestS3(t *testing.T) {
	srv := testenv.StartS3(t)
	ctx := t.Context()

	t.Run("an object written with the root credentials is a file on disk and reads back", func(t *testing.T) {
		_, err := srv.RootClient().PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(srv.Bucket), Key: aws.String("dir/hello.txt"), Body: strings.NewReader("hello"),
		})
		if err != nil {
			t.Fatalf("put: %v", err)
		}
		onDisk, err := os.ReadFile(filepath.Join(srv.Dir, srv.Bucket, "dir", "hello.txt"))
		if err != nil || string(onDisk) != "hello" {
			t.Fatalf("file on disk = %q, %v; want hello", onDisk, err)
		}
		out, err := srv.RootClient().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("dir/hello.txt")})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		defer out.Body.Close()
		if body, _ := io.ReadAll(out.Body); string(body) != "hello" {
			t.Fatalf("get = %q, want hello", body)
		}
	})

	t.Run("a request signed with a wrong secret is refused", func(t *testing.T) {
		_, err := srv.Client(srv.AccessKey, "wrong-"+srv.SecretKey).ListObjectsV2(ctx,
			&s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
		var apiErr smithy.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "SignatureDoesNotMatch" {
			t.Fatalf("list with a wrong secret = %v, want SignatureDoesNotMatch", err)
		}
	})

}

func TestEachS3ServerHasItsOwnFreshBucket(t *testing.T) {
	one, other := testenv.StartS3(t), testenv.StartS3(t)
	if other.Bucket == one.Bucket || other.Endpoint == one.Endpoint {
		t.Fatalf("two servers share bucket %q or endpoint %q", other.Bucket, other.Endpoint)
	}
	out, err := other.RootClient().ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(other.Bucket)})
	if err != nil || len(out.Contents) != 0 {
		t.Fatalf("new bucket: %v, %v; want empty", out, err)
	}
}

func TestRestartedS3ServerKeepsAddressCredentialsAndObjects(t *testing.T) {
	srv := testenv.StartS3(t)
	ctx := t.Context()
	if err := srv.Restart(ctx); err == nil {
		t.Fatal("Restart of a running server succeeded, want an error")
	}
	if _, err := srv.RootClient().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(srv.Bucket), Key: aws.String("kept.txt"), Body: strings.NewReader("kept"),
	}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.RootClient().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("kept.txt")}); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := srv.RootClient().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("kept.txt")})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	defer out.Body.Close()
	if body, _ := io.ReadAll(out.Body); string(body) != "kept" {
		t.Fatalf("get after restart = %q, want kept", body)
	}
}

func TestKubeletDir(t *testing.T) {
	k := testenv.StartKubeletDir(t)
	for _, dir := range []string{filepath.Dir(k.SourceDir("mp-x")), k.RegistryDir(), filepath.Join(k.Root, "pods")} {
		if info, err := os.Stat(dir); err != nil || !info.IsDir() {
			t.Errorf("%s: not a directory (%v)", dir, err)
		}
	}
	if _, err := mount.CheckPropagates(filepath.Join(k.Root, "pods")); err != nil {
		t.Errorf("mounts under the kubelet dir do not propagate, as they do under kubelet's: %v", err)
	}
	want := filepath.Join(k.Root, "pods", "uid-1", "volumes", "kubernetes.io~csi", "pv-1", "mount")
	if got := k.TargetPath("uid-1", "pv-1"); got != want {
		t.Errorf("TargetPath = %q, want %q", got, want)
	}
}

func TestEnvtestVersionsMatchTheBuildScript(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, "hack", "kube-bins.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"K8S_VERSION=${K8S_VERSION:-" + testenv.KubernetesVersion + "}",
		"ETCD_VERSION=${ETCD_VERSION:-" + testenv.EtcdVersion + "}",
	} {
		if !strings.Contains(string(script), want) {
			t.Errorf("hack/kube-bins.sh does not contain %q: the test binaries and the script disagree", want)
		}
	}
}

func TestMissingEnvtestBinariesSayHowToBuildThem(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, err := testenv.StartAPIServerE()
	if err == nil || !strings.Contains(err.Error(), "make envtest-bins") {
		t.Fatalf("StartAPIServerE with no binaries = %v, want an error naming `make envtest-bins`", err)
	}
}

func TestMissingVersitygwSaysHowToBuildIt(t *testing.T) {
	t.Setenv("S3CSI_VERSITYGW", filepath.Join(t.TempDir(), "versitygw"))
	_, err := testenv.StartS3E(t.Context(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("StartS3E with no versitygw = %v, want an error naming `make tools`", err)
	}
}

func TestAnHTTPSS3ServerIsTrustedOnlyWithItsCA(t *testing.T) {
	srv := testenv.StartS3TLS(t)
	if !strings.HasPrefix(srv.Endpoint, "https://") || len(srv.CAPEM) == 0 {
		t.Fatalf("endpoint %s, CA %d bytes: want HTTPS with a CA", srv.Endpoint, len(srv.CAPEM))
	}
	if _, err := srv.RootClient().ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)}); err != nil {
		t.Fatalf("list trusting the CA: %v", err)
	}
	untrusting := s3.New(s3.Options{BaseEndpoint: aws.String(srv.Endpoint), Region: srv.Region, UsePathStyle: true,
		Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
	_, err := untrusting.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("list without the CA = %v, want a certificate error", err)
	}
}
