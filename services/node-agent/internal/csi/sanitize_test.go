package csi

import (
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestSanitizeStripsSecretsAndVolumeContext(t *testing.T) {
	req := &csipb.NodePublishVolumeRequest{
		VolumeId:      "vol",
		TargetPath:    "/t",
		Secrets:       map[string]string{"secret_access_key": "canary-secret"},
		VolumeContext: map[string]string{"bucketName": "b", "note": "canary-context"},
	}
	got := protojson.Format(Sanitize(req))
	for _, leak := range []string{"canary-secret", "canary-context"} {
		if strings.Contains(got, leak) {
			t.Fatalf("sanitized request %s shows %q", got, leak)
		}
	}
	if !strings.Contains(got, "vol") || !strings.Contains(got, redacted) {
		t.Fatalf("sanitized request %s lost the non-secret fields or the redaction marker", got)
	}
	if req.GetSecrets()["secret_access_key"] != "canary-secret" {
		t.Fatal("Sanitize modified the request itself")
	}
}
