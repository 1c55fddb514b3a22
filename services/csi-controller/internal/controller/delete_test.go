package controller_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func TestDeleteVolumePolicies(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name string
		// setup returns the volume ID to delete.
		setup      func(t *testing.T) string
		code       codes.Code
		message    string
		bucketKept bool
	}{
		{
			name:  "a missing bucket is success",
			setup: func(*testing.T) string { return "csi-s3-never-created-0123456789" },
			code:  codes.OK,
		},
		{
			name:  "a volume ID that cannot be a bucket is success",
			setup: func(*testing.T) string { return "Not_A_Bucket" },
			code:  codes.OK,
		},
		{
			name: "a bucket s3csi did not create is kept, with its data, and the call succeeds",
			setup: func(t *testing.T) string {
				putObject(t, e.s3, e.s3.Bucket, "static-data")
				return e.s3.Bucket
			},
			code: codes.OK, bucketKept: true,
		},
		{
			name: "an empty bucket s3csi created is deleted",
			setup: func(t *testing.T) string {
				return mustCreate(t, e, "pvc-delete-empty", nil)
			},
			code: codes.OK,
		},
		{
			name: "a non-empty bucket is kept and the call fails saying how to fix it",
			setup: func(t *testing.T) string {
				id := mustCreate(t, e, "pvc-delete-full", nil)
				putObject(t, e.s3, id, "dir/file")
				return id
			},
			code: codes.FailedPrecondition, message: "emptyBucketOnDelete", bucketKept: true,
		},
		{
			name: "a bucket holding only an unfinished multipart upload is not empty",
			setup: func(t *testing.T) string {
				id := mustCreate(t, e, "pvc-delete-mpu", nil)
				startUpload(t, e, id, "big-file")
				return id
			},
			code: codes.FailedPrecondition, message: "emptyBucketOnDelete", bucketKept: true,
		},
		{
			name: "a non-empty bucket whose StorageClass opted in is emptied and deleted",
			setup: func(t *testing.T) string {
				id := mustCreate(t, e, "pvc-delete-full-optin", map[string]string{"emptyBucketOnDelete": "true"})
				for _, k := range []string{"a", "b/c", "d/e/f"} {
					putObject(t, e.s3, id, k)
				}
				startUpload(t, e, id, "unfinished")
				return id
			},
			code: codes.OK,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.setup(t)
			for attempt := range 2 { // DeleteVolume is idempotent: the second call answers the same
				_, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: id})
				wantCode(t, err, tt.code)
				if tt.message != "" && !strings.Contains(err.Error(), tt.message) {
					t.Errorf("attempt %d: error = %v, want it to mention %q", attempt, err, tt.message)
				}
			}
			if got := bucketExists(t, e.s3, id); got != tt.bucketKept {
				t.Errorf("bucket %s exists = %v, want %v", id, got, tt.bucketKept)
			}
		})
	}
}

func TestDeleteVolumeRequiresAVolumeID(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{})
	wantCode(t, err, codes.InvalidArgument)
}

func mustCreate(t *testing.T, e *env, name string, params map[string]string) string {
	t.Helper()
	resp, err := e.ctrl.CreateVolume(testContext(t), createReq(name, withParams(params)))
	if err != nil {
		t.Fatalf("CreateVolume(%s) = %v", name, err)
	}
	return resp.GetVolume().GetVolumeId()
}

func startUpload(t *testing.T, e *env, bucket, key string) {
	t.Helper()
	_, err := e.s3.RootClient().CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{
		Bucket: aws.String(bucket), Key: aws.String(key),
	})
	if err != nil {
		t.Fatalf("start multipart upload: %v", err)
	}
}

func TestValidateVolumeCapabilities(t *testing.T) {
	e := newEnv(t, nil)
	id := mustCreate(t, e, "pvc-validate", nil)
	block := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
	tests := []struct {
		name      string
		id        string
		caps      []*csi.VolumeCapability
		code      codes.Code
		confirmed bool
	}{
		{"reader-only across nodes is confirmed", id, []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}, codes.OK, true},
		{"a single-node writer is confirmed", id, []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, codes.OK, true},
		{"a block volume is not confirmed", id, []*csi.VolumeCapability{block}, codes.OK, false},
		{"an unknown volume is not found", "csi-s3-no-such-volume", []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}, codes.NotFound, false},
		{"no capability is invalid", id, nil, codes.InvalidArgument, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := e.ctrl.ValidateVolumeCapabilities(testContext(t), &csi.ValidateVolumeCapabilitiesRequest{VolumeId: tt.id, VolumeCapabilities: tt.caps})
			wantCode(t, err, tt.code)
			if (resp.GetConfirmed() != nil) != tt.confirmed {
				t.Errorf("confirmed = %v, want %v (message %q)", resp.GetConfirmed(), tt.confirmed, resp.GetMessage())
			}
		})
	}
}
