package controller

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/volumecontext"
)

// DeleteVolume deletes the volume's bucket if s3csi created it.
//
// Problem: a PV may point at a bucket s3csi did not create (a static volume, or a volume
// handle reused by hand), and a bucket may still hold data; deleting either loses data, while
// swallowing errors (as the Scality v2 driver did) leaks buckets silently.
// Solution: only a bucket tagged as s3csi's is deleted; a non-empty one only when its
// StorageClass opted in at creation (the tag records it), else FAILED_PRECONDITION tells the
// operator what to do and the provisioner retries; credential and endpoint errors are returned.
// Invariant: DeleteVolume succeeds only when the bucket is gone or is not s3csi's to delete.
func (c *Controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	bucket := req.GetVolumeId()
	if bucket == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	log := c.log(ctx).WithValues("volume", bucket)
	if volumecontext.ValidateBucketName(bucket) != nil {
		log.Info("Nothing to delete: the volume ID is not a bucket name")
		return &csi.DeleteVolumeResponse{}, nil
	}
	api, _, err := c.clients.forSecrets(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	unlock, err := c.lockVolume(ctx, bucket)
	if err != nil {
		return nil, err
	}
	defer unlock()

	ops := bucketOps{api: api, metrics: c.metrics}
	have, err := ops.ownership(ctx, bucket)
	if isNoSuchBucket(err) {
		log.Info("Bucket already gone")
		c.notifyDeleted(bucket, false, "absent")
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err != nil {
		return nil, s3Status(err, fmt.Sprintf("read the tags of bucket %q", bucket))
	}
	if !have.owned {
		log.Info("Keeping the bucket: s3csi did not create it")
		c.notifyDeleted(bucket, false, "foreign")
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err := c.makeEmpty(ctx, ops, bucket, have); err != nil {
		return nil, err
	}
	err = ops.remove(ctx, bucket)
	if apiCode(err) == codeBucketNotEmpty {
		return nil, status.Errorf(codes.FailedPrecondition,
			"bucket %q is not empty (objects were written during the delete, or it holds object versions); empty it and the deletion is retried", bucket)
	}
	if err != nil {
		return nil, s3Status(err, fmt.Sprintf("delete bucket %q", bucket))
	}
	log.Info("Deleted bucket")
	c.notifyDeleted(bucket, true, have.createdAt)
	return &csi.DeleteVolumeResponse{}, nil
}

// makeEmpty returns nil when the bucket is empty or was emptied as its tag allows, and
// FAILED_PRECONDITION with the remedy otherwise.
func (c *Controller) makeEmpty(ctx context.Context, ops bucketOps, bucket string, have ownership) error {
	empty, err := ops.isEmpty(ctx, bucket)
	if err != nil {
		return s3Status(err, fmt.Sprintf("list bucket %q", bucket))
	}
	if empty {
		return nil
	}
	if !have.emptyOnDelete {
		return status.Errorf(codes.FailedPrecondition,
			"bucket %q still holds objects and is kept; copy what you need, empty it (e.g. aws s3 rm s3://%s --recursive) and the deletion is retried; "+
				"StorageClasses with %s: \"true\" delete the objects instead", bucket, bucket, ParamEmptyBucketOnDelete)
	}
	c.log(ctx).Info("Deleting the objects of the bucket, as its StorageClass asked", "volume", bucket)
	if err := ops.empty(ctx, bucket); err != nil {
		return s3Status(err, fmt.Sprintf("empty bucket %q", bucket))
	}
	return nil
}

func (c *Controller) notifyDeleted(bucket string, deleted bool, idPart string) {
	c.notify(&eventspb.VolumeDeleted{VolumeId: bucket, BucketName: bucket, BucketDeleted: deleted}, bucket, idPart)
}
