package csi_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

// TestPublishOverHTTPSWithTheDriversCA runs the node path with the real mounter against an S3
// endpoint whose certificate a private CA signed. The node-agent reads the driver's CA bundle
// at each mount and sends it in the mount request: with the CA the bucket is served; without it
// the publish fails with a message that says the certificate is not trusted and names the
// chart value; with a file that is not PEM certificates it fails before any mount is made.
func TestPublishOverHTTPSWithTheDriversCA(t *testing.T) {
	srv := testenv.StartS3TLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := srv.RootClient().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(srv.Bucket), Key: aws.String("hello.txt"), Body: strings.NewReader("over HTTPS"),
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goodCA, badCA := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "bad.crt")
	if err := os.WriteFile(goodCA, srv.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badCA, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := credentials.Static{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}
	publish := func(t *testing.T, caFile string) (string, error) {
		t.Helper()
		n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond, s3: srv, driverCreds: creds, caBundleFile: caFile})
		pv, volumeID, uid := "pv-tls", "vol-tls", uuid.NewUUID()
		mpName := mppod.Name(string(uid), pv)
		n.createMountpointPod(mpName)
		n.assign(pv, volumeID, string(uid), mpName)
		target := n.target(uid, pv)
		pctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := n.client.NodePublishVolume(pctx, publishRequest(volumeID, target, srv.Bucket, uid))
		if err == nil {
			t.Cleanup(func() { cleanupMount(t, target); cleanupMount(t, n.kubelet.SourceDir(mpName)) })
		}
		return target, err
	}

	t.Run("with the CA the bucket is served", func(t *testing.T) {
		target, err := publish(t, goodCA)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		if got := readFile(t, filepath.Join(target, "hello.txt")); got != "over HTTPS" {
			t.Fatalf("target shows %q, want the object's content", got)
		}
	})
	t.Run("without the CA the publish says the certificate is not trusted and names s3.caBundle", func(t *testing.T) {
		_, err := publish(t, "")
		if status.Code(err) != codes.Internal {
			t.Fatalf("publish error = %v, want Internal", err)
		}
		for _, want := range []string{"not trusted", "s3.caBundle", "unknown authority"} {
			if !strings.Contains(status.Convert(err).Message(), want) {
				t.Errorf("publish error %q does not say %q", status.Convert(err).Message(), want)
			}
		}
	})
	t.Run("a CA file that is not PEM certificates fails the publish naming s3.caBundle", func(t *testing.T) {
		_, err := publish(t, badCA)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "s3.caBundle") {
			t.Fatalf("publish error = %v, want FailedPrecondition naming s3.caBundle", err)
		}
	})
}
