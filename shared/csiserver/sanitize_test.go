package csiserver_test

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/s3csi/s3csi/shared/csiserver"
)

func TestSanitizeNeverShowsSecretsOrContextValues(t *testing.T) {
	tests := []struct {
		name   string
		msg    proto.Message
		keep   []string
		hidden []string
	}{
		{
			name: "a CreateVolume request keeps its name and parameters and hides its secrets",
			msg: &csi.CreateVolumeRequest{Name: "pvc-1", Parameters: map[string]string{"emptyBucketOnDelete": "true"},
				Secrets: map[string]string{"access_key_id": "AKIDVALUE", "secret_access_key": "SKVALUE"}},
			keep:   []string{"pvc-1", "emptyBucketOnDelete", "access_key_id", csiserver.Redacted},
			hidden: []string{"AKIDVALUE", "SKVALUE"},
		},
		{
			name: "a CreateVolume response shows the volume context keys only",
			msg: &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "vol-b", VolumeContext: map[string]string{
				"bucketName": "my-bucket", "csi.storage.k8s.io/serviceAccount.tokens": "TOKENVALUE",
			}}},
			keep:   []string{"vol-b", "bucketName", "serviceAccount.tokens"},
			hidden: []string{"my-bucket", "TOKENVALUE"},
		},
		{
			name:   "a DeleteVolume request hides its secrets",
			msg:    &csi.DeleteVolumeRequest{VolumeId: "vol-b", Secrets: map[string]string{"secret_access_key": "SKVALUE"}},
			keep:   []string{"vol-b"},
			hidden: []string{"SKVALUE"},
		},
		{
			name: "a NodePublishVolume request hides its secrets and its volume and publish context values",
			msg: &csi.NodePublishVolumeRequest{
				VolumeId: "vol-n", TargetPath: "/target",
				Secrets:        map[string]string{"secret_access_key": "SKVALUE"},
				VolumeContext:  map[string]string{"bucketName": "b", "note": "CONTEXTVALUE"},
				PublishContext: map[string]string{"hint": "PUBLISHVALUE"},
				VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{
					Mount: &csi.VolumeCapability_MountVolume{MountFlags: []string{"allow-other"}},
				}},
			},
			keep:   []string{"vol-n", "/target", "secret_access_key", "note", "hint", "allow-other"},
			hidden: []string{"SKVALUE", "CONTEXTVALUE", "PUBLISHVALUE"},
		},
		{
			name: "a NodeStageVolume request hides its secrets",
			msg: &csi.NodeStageVolumeRequest{VolumeId: "vol-s", StagingTargetPath: "/stage",
				Secrets: map[string]string{"k": "STAGESECRET"}},
			keep:   []string{"vol-s", "/stage"},
			hidden: []string{"STAGESECRET"},
		},
		{
			name: "a ControllerPublishVolume response hides its publish context values",
			msg:  &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"k": "PUBLISHVALUE"}},
			keep: []string{"\"k\""}, hidden: []string{"PUBLISHVALUE"},
		},
		{
			name: "a message without secret fields, as kubelet registration sends, is shown whole",
			msg:  wrapperspb.String("s3.csi.scality.com"),
			keep: []string{"s3.csi.scality.com"},
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

func TestSecretValuesFindsEverySecretLongestFirst(t *testing.T) {
	got := csiserver.SecretValues(&csi.NodePublishVolumeRequest{
		VolumeId: "not-a-secret",
		Secrets:  map[string]string{"a": "short", "b": "a-longer-secret", "c": " ", "d": "short"},
	})
	want := []string{"a-longer-secret", "short"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("SecretValues() = %q, want %q", got, want)
	}
}
