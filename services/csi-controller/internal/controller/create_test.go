package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/s3csi/s3csi/shared/testenv"
	"github.com/s3csi/s3csi/shared/volumecontext"

	"github.com/s3csi/s3csi/services/csi-controller/internal/controller"
	"github.com/s3csi/s3csi/services/csi-controller/internal/s3client"
)

func TestCreateVolumeIsIdempotent(t *testing.T) {
	e := newEnv(t, nil)
	ctx := testContext(t)
	req := createReq("pvc-0a1b2c3d-idempotent", withParams(map[string]string{"mountpointPodServiceAccountName": "mp-sa"}))

	first, err := e.ctrl.CreateVolume(ctx, req)
	if err != nil {
		t.Fatalf("CreateVolume() = %v", err)
	}
	second, err := e.ctrl.CreateVolume(ctx, req)
	if err != nil {
		t.Fatalf("CreateVolume() again = %v", err)
	}
	v := first.GetVolume()
	if v.GetVolumeId() != second.GetVolume().GetVolumeId() || v.GetCapacityBytes() != second.GetVolume().GetCapacityBytes() {
		t.Errorf("retry returned %v, want %v", second.GetVolume(), v)
	}
	if want := controller.BucketName(testPrefix, req.GetName()); v.GetVolumeId() != want {
		t.Errorf("volume ID = %q, want the derived bucket name %q", v.GetVolumeId(), want)
	}
	vc, err := volumecontext.Parse(v.GetVolumeContext())
	if err != nil {
		t.Fatalf("the node would refuse the volume context: %v", err)
	}
	if vc.BucketName != v.GetVolumeId() || vc.AuthenticationSource != "driver" || !vc.DynamicProvisioning || vc.MountpointPodServiceAccountName != "mp-sa" {
		t.Errorf("volume context = %v", v.GetVolumeContext())
	}
	if got := buckets(t, e.s3, testPrefix); len(got) != 1 {
		t.Errorf("buckets = %v, want exactly one", got)
	}
	tags, err := e.s3.RootClient().GetBucketTagging(t.Context(), &s3.GetBucketTaggingInput{Bucket: aws.String(v.GetVolumeId())})
	if err != nil {
		t.Fatalf("read tags: %v", err)
	}
	found := false
	for _, tag := range tags.TagSet {
		if aws.ToString(tag.Key) == controller.TagVolumeName && aws.ToString(tag.Value) == req.GetName() {
			found = true
		}
	}
	if !found {
		t.Errorf("bucket tags = %v, want %s=%s", tags.TagSet, controller.TagVolumeName, req.GetName())
	}
}

func TestCreateVolumeRetriedAfterASlowCreateBucketReturnsTheSameBucket(t *testing.T) {
	srv := testenv.StartS3(t)
	p := startProxy(t, srv.Endpoint, nil)
	e := newEnv(t, srv, withEndpoint(s3client.Endpoint{URL: p.URL, Region: srv.Region, PathStyle: true}))
	req := createReq("pvc-slow-create")

	// The provisioner's first call times out while S3 creates the bucket.
	p.delayCreate.Store(int64(2 * time.Second))
	ctx, cancel := context.WithTimeout(testContext(t), 300*time.Millisecond)
	_, err := e.ctrl.CreateVolume(ctx, req)
	cancel()
	wantCode(t, err, codes.DeadlineExceeded)
	if got := buckets(t, srv, testPrefix); len(got) != 1 {
		t.Fatalf("after the timed-out call, buckets = %v, want the one S3 created", got)
	}

	p.delayCreate.Store(0)
	resp, err := e.ctrl.CreateVolume(testContext(t), req)
	if err != nil {
		t.Fatalf("retried CreateVolume() = %v", err)
	}
	if got := buckets(t, srv, testPrefix); len(got) != 1 || got[0] != resp.GetVolume().GetVolumeId() {
		t.Errorf("buckets = %v, want only %s", got, resp.GetVolume().GetVolumeId())
	}
	// The retry tagged the bucket, so DeleteVolume will remove it.
	if _, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId()}); err != nil {
		t.Fatalf("DeleteVolume() = %v", err)
	}
	if got := buckets(t, srv, testPrefix); len(got) != 0 {
		t.Errorf("after DeleteVolume, buckets = %v, want none", got)
	}
}

func TestConcurrentDuplicateCreateVolumesMakeOneBucket(t *testing.T) {
	e := newEnv(t, nil)
	const n = 8
	type result struct {
		id  string
		err error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			resp, err := e.ctrl.CreateVolume(testContext(t), createReq("pvc-concurrent"))
			results <- result{resp.GetVolume().GetVolumeId(), err}
		}()
	}
	ids := map[string]bool{}
	for range n {
		r := <-results
		if r.err != nil {
			t.Errorf("CreateVolume() = %v", r.err)
			continue
		}
		ids[r.id] = true
	}
	if len(ids) != 1 {
		t.Errorf("volume IDs = %v, want one", ids)
	}
	if got := buckets(t, e.s3, testPrefix); len(got) != 1 {
		t.Errorf("buckets = %v, want one", got)
	}
}

func TestCreateVolumeRefusesAnIncompatibleRetry(t *testing.T) {
	e := newEnv(t, nil)
	ctx := testContext(t)
	base := createReq("pvc-incompatible", func(r *csi.CreateVolumeRequest) {
		r.CapacityRange = &csi.CapacityRange{RequiredBytes: 1 << 30, LimitBytes: 1 << 30}
	})
	if _, err := e.ctrl.CreateVolume(ctx, base); err != nil {
		t.Fatalf("CreateVolume() = %v", err)
	}
	tests := []struct {
		name   string
		modify func(*csi.CreateVolumeRequest)
	}{
		{"another emptyBucketOnDelete is incompatible", withParams(map[string]string{"emptyBucketOnDelete": "true"})},
		{"another capacity is incompatible", func(r *csi.CreateVolumeRequest) {
			r.CapacityRange = &csi.CapacityRange{RequiredBytes: 2 << 30, LimitBytes: 2 << 30}
		}},
		{"a provisioner secret instead of the driver's credentials is incompatible", withSecrets(map[string]string{
			"access_key_id": e.s3.AccessKey, "secret_access_key": e.s3.SecretKey,
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := createReq(base.GetName(), func(r *csi.CreateVolumeRequest) { r.CapacityRange = base.GetCapacityRange() }, tt.modify)
			_, err := e.ctrl.CreateVolume(testContext(t), req)
			wantCode(t, err, codes.AlreadyExists)
		})
	}
}

func TestCreateVolumeRefusesBadRequests(t *testing.T) {
	e := newEnv(t, nil)
	block := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
	tests := []struct {
		name    string
		req     *csi.CreateVolumeRequest
		code    codes.Code
		message string
	}{
		{"an unknown parameter is refused, not dropped", createReq("pvc-bad", withParams(map[string]string{"emptyBucketOndelete": "true"})), codes.InvalidArgument, "emptyBucketOndelete"},
		{"a parameter that is not a boolean is refused", createReq("pvc-bad", withParams(map[string]string{"emptyBucketOnDelete": "yes please"})), codes.InvalidArgument, "emptyBucketOnDelete"},
		{"a resource parameter the node would refuse is refused", createReq("pvc-bad", withParams(map[string]string{"mountpointContainerResourcesLimitsMemory": "lots"})), codes.InvalidArgument, "mountpointContainerResourcesLimitsMemory"},
		{"a request without a name is refused", createReq(""), codes.InvalidArgument, "name"},
		{"a request without capabilities is refused", createReq("pvc-bad", func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = nil }), codes.InvalidArgument, "capabilities"},
		{"a block volume is refused", createReq("pvc-bad", func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = []*csi.VolumeCapability{block} }), codes.InvalidArgument, "block"},
		{"a multi-node single-writer volume is refused", createReq("pvc-bad", func(r *csi.CreateVolumeRequest) {
			r.VolumeCapabilities = []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)}
		}), codes.InvalidArgument, "MULTI_NODE_SINGLE_WRITER"},
		{"a required capacity above the limit is out of range", createReq("pvc-bad", func(r *csi.CreateVolumeRequest) {
			r.CapacityRange = &csi.CapacityRange{RequiredBytes: 2, LimitBytes: 1}
		}), codes.OutOfRange, "limit"},
		{"a secret without a secret key is refused", createReq("pvc-bad", withSecrets(map[string]string{"access_key_id": "AK"})), codes.InvalidArgument, "secret_access_key"},
		{"a clone is refused", createReq("pvc-bad", func(r *csi.CreateVolumeRequest) {
			r.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "x"}}}
		}), codes.InvalidArgument, "content source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.ctrl.CreateVolume(testContext(t), tt.req)
			wantCode(t, err, tt.code)
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error = %v, want it to mention %q", err, tt.message)
			}
		})
	}
	if got := buckets(t, e.s3, testPrefix); len(got) != 0 {
		t.Errorf("refused requests left buckets %v", got)
	}
}

func TestCreateVolumeNeverTakesOverABucketHoldingData(t *testing.T) {
	e := newEnv(t, nil)
	name := "pvc-foreign"
	bucket := controller.BucketName(testPrefix, name)
	if err := e.s3.CreateBucket(t.Context(), bucket); err != nil {
		t.Fatal(err)
	}

	t.Run("an empty untagged bucket of the derived name is what an interrupted call left, and is tagged", func(t *testing.T) {
		if _, err := e.ctrl.CreateVolume(testContext(t), createReq(name)); err != nil {
			t.Fatalf("CreateVolume() = %v", err)
		}
	})

	other := "pvc-foreign-data"
	dataBucket := controller.BucketName(testPrefix, other)
	if err := e.s3.CreateBucket(t.Context(), dataBucket); err != nil {
		t.Fatal(err)
	}
	putObject(t, e.s3, dataBucket, "precious")
	t.Run("an untagged bucket holding objects is refused", func(t *testing.T) {
		_, err := e.ctrl.CreateVolume(testContext(t), createReq(other))
		wantCode(t, err, codes.AlreadyExists)
	})
}
