package controller_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/s3csi/s3csi/services/csi-controller/internal/controller"
	"github.com/s3csi/s3csi/services/csi-controller/internal/s3client"
)

func TestBadCredentialsAreReturnedWithTheirCode(t *testing.T) {
	e := newEnv(t, nil)
	owned := mustCreate(t, e, "pvc-owned-by-good-key", nil)
	tests := []struct {
		name    string
		secrets map[string]string
		code    codes.Code
	}{
		{"a wrong secret key is unauthenticated", map[string]string{"access_key_id": e.s3.AccessKey, "secret_access_key": "wrong"}, codes.Unauthenticated},
		{"an unknown access key is unauthenticated", map[string]string{"access_key_id": "NOSUCHKEY", "secret_access_key": "whatever"}, codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name+" on CreateVolume", func(t *testing.T) {
			_, err := e.ctrl.CreateVolume(testContext(t), createReq("pvc-bad-secret", withSecrets(tt.secrets)))
			wantCode(t, err, tt.code)
		})
		t.Run(tt.name+" on DeleteVolume, which keeps the bucket", func(t *testing.T) {
			_, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: owned, Secrets: tt.secrets})
			wantCode(t, err, tt.code)
			if !bucketExists(t, e.s3, owned) {
				t.Errorf("bucket %s was deleted", owned)
			}
		})
	}
	if got := buckets(t, e.s3, controller.BucketName(testPrefix, "pvc-bad-secret")); len(got) != 0 {
		t.Errorf("a refused secret created buckets %v", got)
	}
}

func TestAProvisionerSecretIsUsedAndRecorded(t *testing.T) {
	e := newEnv(t, nil, withDriverCredentials(func() (s3client.Credentials, error) {
		return s3client.Credentials{}, errors.New("no driver credentials in this test")
	}))
	secrets := map[string]string{"access_key_id": e.s3.AccessKey, "secret_access_key": e.s3.SecretKey, "region": e.s3.Region}
	resp, err := e.ctrl.CreateVolume(testContext(t), createReq("pvc-with-secret", withSecrets(secrets)))
	if err != nil {
		t.Fatalf("CreateVolume() = %v", err)
	}
	if got := resp.GetVolume().GetVolumeContext()["authenticationSource"]; got != "secret" {
		t.Errorf("authenticationSource = %q, want secret", got)
	}
	for k, v := range resp.GetVolume().GetVolumeContext() {
		if v == e.s3.SecretKey || v == e.s3.AccessKey {
			t.Errorf("volume context key %q holds a credential", k)
		}
	}
	t.Run("without a secret or driver credentials the call fails saying what to configure", func(t *testing.T) {
		_, err := e.ctrl.CreateVolume(testContext(t), createReq("pvc-no-credentials"))
		wantCode(t, err, codes.FailedPrecondition)
		if !strings.Contains(err.Error(), "provisioner-secret-name") {
			t.Errorf("error = %v, want it to name the StorageClass parameter", err)
		}
	})
	if _, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId(), Secrets: secrets}); err != nil {
		t.Errorf("DeleteVolume() with the secret = %v", err)
	}
}

func TestDirCredentialsReadTheMountedSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, value string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := controller.DirCredentials(dir)(); err == nil {
		t.Error("an empty directory gave credentials")
	}
	write("access_key_id", "AK")
	write("secret_access_key", "SK")
	got, err := controller.DirCredentials(dir)()
	if err != nil || got.AccessKeyID != "AK" || got.SecretAccessKey != "SK" || got.SessionToken != "" {
		t.Errorf("DirCredentials() = %+v, %v", got, err)
	}
	write("session_token", "TOKEN")
	if got, _ := controller.DirCredentials(dir)(); got.SessionToken != "TOKEN" {
		t.Errorf("session token = %q, want TOKEN", got.SessionToken)
	}
}

func TestEnvCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := controller.EnvCredentials()(); err == nil {
		t.Error("EnvCredentials() without the variables succeeded")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AK")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SK")
	if got, err := controller.EnvCredentials()(); err != nil || got.AccessKeyID != "AK" {
		t.Errorf("EnvCredentials() = %+v, %v", got, err)
	}
}

func TestTLSToTheEndpointWithACustomCA(t *testing.T) {
	serverTLS, bundle := testCA(t)
	e0 := newEnv(t, nil)
	p := startProxy(t, e0.s3.Endpoint, serverTLS)
	if !strings.HasPrefix(p.URL, "https://") {
		t.Fatalf("proxy URL = %s, want https", p.URL)
	}
	ep := s3client.Endpoint{URL: p.URL, Region: e0.s3.Region, PathStyle: true}

	t.Run("with the CA bundle the volume is created over TLS", func(t *testing.T) {
		withCA := ep
		withCA.CABundle = bundle
		e := newEnv(t, e0.s3, withEndpoint(withCA))
		id := mustCreate(t, e, "pvc-over-tls", nil)
		if _, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("DeleteVolume() = %v", err)
		}
	})
	t.Run("without the CA bundle the certificate is refused, naming the chart value that gives the CA", func(t *testing.T) {
		e := newEnv(t, e0.s3, withEndpoint(ep))
		_, err := e.ctrl.CreateVolume(testContext(t), createReq("pvc-untrusted-tls"))
		// Not Unavailable: the endpoint answered, and retrying changes nothing until the
		// operator gives the CA.
		wantCode(t, err, codes.FailedPrecondition)
		for _, want := range []string{"certificate is not trusted", "s3.caBundle", "unknown authority"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error = %v, want it to say %q", err, want)
			}
		}
	})
}
