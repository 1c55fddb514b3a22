package controller

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/volumecontext"
)

// CreateVolume creates the volume's bucket, or returns it again on a retry.
//
// Problem: the provisioner retries after its timeout, possibly while the first call still runs
// or after it created the bucket but before it tagged it; a retry must neither create a second
// bucket nor fail on the first one's leftovers.
// Solution: the bucket name is derived from the request name; the bucket's tags record the
// request name, its parameters, capacity and credential source, signed (see proven); a retry
// finds the bucket and compares; a bucket of that name without a valid proof that is still
// empty is the half-done work of an earlier call (or of no use to anyone) and is tagged now.
// Invariant: one bucket per request name; a response, once returned, is returned again for any
// compatible retry; a bucket holding data that this csi-controller did not sign is never taken
// over.
func (c *Controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources (snapshots, clones) are not supported")
	}
	capacity, err := capacityOf(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	params, err := ParseParams(req.GetParameters())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "invalid StorageClass parameters: %v", err)
	}
	api, authSource, err := c.clients.forSecrets(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	bucket := BucketName(c.prefix, req.GetName())
	unlock, err := c.lockVolume(ctx, bucket)
	if err != nil {
		return nil, err
	}
	defer unlock()

	want := c.signed(bucket, ownership{
		owned: true, volumeName: req.GetName(), parameters: fingerprint(params, authSource),
		capacity: capacity, emptyOnDelete: params.EmptyBucketOnDelete,
		createdAt: c.now().UTC().Format(time.RFC3339Nano), authSource: authSource,
	})
	ops := bucketOps{api: api, metrics: c.metrics}
	got, err := c.ensureBucket(ctx, ops, bucket, want, req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	c.log(ctx).Info("Volume ready", "volume", bucket, "name", req.GetName(), "authenticationSource", authSource)
	c.notify(&eventspb.VolumeCreated{VolumeId: bucket, BucketName: bucket, RequestName: req.GetName()},
		bucket, got.createdAt)

	volCtx := maps.Clone(params.PassThrough)
	volCtx[volumecontext.KeyBucketName] = bucket
	volCtx[volumecontext.KeyAuthenticationSource] = authSource
	volCtx[volumecontext.KeyDynamicProvisioning] = "true"
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId: bucket, CapacityBytes: got.capacity, VolumeContext: volCtx,
	}}, nil
}

// ensureBucket makes sure bucket exists and is tagged for want (signed), and returns its
// ownership.
// It probes with GetBucketTagging rather than HeadBucket: one call tells "missing", "not
// s3csi's" and "s3csi's, for this volume" apart, and its error responses have a body, so a
// wrong secret is told from a missing permission.
func (c *Controller) ensureBucket(ctx context.Context, ops bucketOps, bucket string, want ownership, rng *csi.CapacityRange) (ownership, error) {
	have, err := ops.ownership(ctx, bucket)
	if isNoSuchBucket(err) {
		created, cerr := ops.create(ctx, bucket)
		if apiCode(cerr) == codeBucketAlreadyExists {
			return ownership{}, status.Errorf(codes.AlreadyExists,
				"bucket %q is owned by another S3 account; change --bucket-prefix or use that account's credentials", bucket)
		}
		if cerr != nil {
			return ownership{}, s3Status(cerr, fmt.Sprintf("create bucket %q", bucket))
		}
		if created {
			if err := ops.tag(ctx, bucket, want); err != nil {
				return ownership{}, s3Status(err, fmt.Sprintf("tag bucket %q", bucket))
			}
			c.log(ctx).Info("Created bucket", "volume", bucket)
			return want, nil
		}
		// Another replica created it meanwhile: read what it recorded.
		have, err = ops.ownership(ctx, bucket)
	}
	if err != nil {
		return ownership{}, s3Status(err, fmt.Sprintf("read the tags of bucket %q", bucket))
	}
	if !c.proven(bucket, have) {
		return c.adopt(ctx, ops, bucket, want, have.owned)
	}
	switch {
	case have.volumeName != want.volumeName:
		return ownership{}, status.Errorf(codes.AlreadyExists,
			"bucket %q already belongs to volume %q; it is not shared with volume %q", bucket, have.volumeName, want.volumeName)
	case have.parameters != want.parameters:
		return ownership{}, status.Errorf(codes.AlreadyExists,
			"volume %q already exists with other parameters or another authentication source", want.volumeName)
	case !capacityFits(have.capacity, rng):
		return ownership{}, status.Errorf(codes.AlreadyExists,
			"volume %q already exists with capacity %d bytes, outside the requested range", want.volumeName, have.capacity)
	}
	return have, nil
}

// adopt tags a bucket of the derived name that has no valid proof when it is empty: it is
// what an earlier call left between CreateBucket and PutBucketTagging, or a bucket tagged by
// someone else or by an s3csi release older than the proofs, which holds nothing to lose. A
// bucket holding objects is someone's data and is refused.
func (c *Controller) adopt(ctx context.Context, ops bucketOps, bucket string, want ownership, tagged bool) (ownership, error) {
	empty, err := ops.isEmpty(ctx, bucket)
	if err != nil {
		return ownership{}, s3Status(err, fmt.Sprintf("list bucket %q", bucket))
	}
	if !empty && tagged {
		return ownership{}, status.Errorf(codes.AlreadyExists,
			"bucket %q exists, holds objects and carries s3csi tags without an ownership proof this csi-controller can verify; it is not taken over: rename it, or use it through a static PersistentVolume", bucket)
	}
	if !empty {
		return ownership{}, status.Errorf(codes.AlreadyExists,
			"bucket %q exists, holds objects and was not created by s3csi; it is not taken over: rename it, or use it through a static PersistentVolume", bucket)
	}
	if err := ops.tag(ctx, bucket, want); err != nil {
		return ownership{}, s3Status(err, fmt.Sprintf("tag bucket %q", bucket))
	}
	c.log(ctx).Info("Tagged an empty bucket of the volume's name that had no valid ownership proof", "volume", bucket, "hadS3csiTags", tagged)
	return want, nil
}

// capacityOf returns the capacity to record: the required bytes, else DefaultCapacityBytes
// capped by the limit. A bucket has no size, so any range is satisfiable.
func capacityOf(r *csi.CapacityRange) (int64, error) {
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if required < 0 || limit < 0 {
		return 0, status.Errorf(codes.OutOfRange, "capacity range must not be negative: required %d, limit %d", required, limit)
	}
	if limit > 0 && required > limit {
		return 0, status.Errorf(codes.OutOfRange, "required bytes %d exceed limit bytes %d", required, limit)
	}
	if required > 0 {
		return required, nil
	}
	if limit > 0 && limit < DefaultCapacityBytes {
		return limit, nil
	}
	return DefaultCapacityBytes, nil
}

// capacityFits reports whether a volume of capacity satisfies the range of a retry.
func capacityFits(capacity int64, r *csi.CapacityRange) bool {
	if req := r.GetRequiredBytes(); req > 0 && capacity < req {
		return false
	}
	if lim := r.GetLimitBytes(); lim > 0 && capacity > lim {
		return false
	}
	return true
}
