package csiserver_test

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/services/csi-controller/internal/csiserver"
)

func TestSanitizeStripsSecretsAndVolumeContextValues(t *testing.T) {
	tests := []struct {
		name   string
		msg    proto.Message
		keep   []string
		hidden []string
	}{
		{
			name: "CreateVolume secrets are stripped, parameters kept",
			msg: &csi.CreateVolumeRequest{Name: "pvc-1", Parameters: map[string]string{"emptyBucketOnDelete": "true"},
				Secrets: map[string]string{"access_key_id": "AKIDVALUE", "secret_access_key": "SKVALUE"}},
			keep:   []string{"pvc-1", "emptyBucketOnDelete", "access_key_id"},
			hidden: []string{"AKIDVALUE", "SKVALUE"},
		},
		{
			name: "a volume context keeps the bucket and hides other values",
			msg: &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "b", VolumeContext: map[string]string{
				"bucketName": "my-bucket", "csi.storage.k8s.io/serviceAccount.tokens": "TOKENVALUE",
			}}},
			keep:   []string{"my-bucket", "serviceAccount.tokens"},
			hidden: []string{"TOKENVALUE"},
		},
		{
			name: "DeleteVolume secrets are stripped",
			msg:  &csi.DeleteVolumeRequest{VolumeId: "b", Secrets: map[string]string{"secret_access_key": "SKVALUE"}},
			keep: []string{"\"b\""}, hidden: []string{"SKVALUE"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := proto.Clone(tt.msg)
			got := csiserver.Sanitize(tt.msg)
			for _, k := range tt.keep {
				if !strings.Contains(got, k) {
					t.Errorf("Sanitize() = %s, want it to keep %q", got, k)
				}
			}
			for _, h := range tt.hidden {
				if strings.Contains(got, h) {
					t.Errorf("Sanitize() = %s, leaks %q", got, h)
				}
			}
			if !proto.Equal(orig, tt.msg) {
				t.Error("Sanitize() modified its argument")
			}
		})
	}
	if got := csiserver.Sanitize(nil); got != "null" {
		t.Errorf("Sanitize(nil) = %q", got)
	}
}
