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

// Reasons of the volume.deleted event.
const (
	ReasonDeleted            = "Deleted"
	ReasonAbsent             = "Absent"
	ReasonNotCreatedByS3csi  = "NotCreatedByS3csi"
	ReasonOwnershipNotProven = "OwnershipNotProven"
)

// DeleteVolume deletes the volume's bucket if this csi-controller can prove it created it.
//
// Problem: a PV may point at a bucket s3csi did not create (a static volume, a volume handle
// reused by hand, or a bucket someone tagged as s3csi's), and a bucket may still hold data;
// deleting either loses data, while swallowing errors (as the Scality v2 driver did) leaks
// buckets silently. A bucket created with a provisioner secret must not be deleted with the
// driver's credentials because the secret went missing.
// Solution: only a bucket whose tags carry a valid ownership proof (see proven) is deleted; a
// non-empty one only when its StorageClass opted in at creation (the signed tags record it),
// else FAILED_PRECONDITION tells the operator what to do and the provisioner retries; a bucket
// created with a provisioner secret is deleted only by a request carrying a secret; credential
// and endpoint errors are returned.
// Invariant: DeleteVolume succeeds only when the bucket is gone or is not provably s3csi's to
// delete, and it never empties nor deletes a bucket it cannot prove it created.
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
	api, authSource, err := c.clients.forSecrets(req.GetSecrets())
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
		c.notifyDeleted(bucket, ReasonAbsent, "absent")
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err != nil {
		return nil, s3Status(err, readTagsWhat(bucket, authSource, err))
	}
	if !have.owned {
		log.Info("Keeping the bucket: s3csi did not create it")
		c.notifyDeleted(bucket, ReasonNotCreatedByS3csi, "foreign")
		return &csi.DeleteVolumeResponse{}, nil
	}
	if !c.proven(bucket, have) {
		log.Info("Keeping the bucket: it carries s3csi tags without an ownership proof this csi-controller can verify "+
			"(tagged by someone else, by another installation, or by an s3csi release older than the proofs); delete it by hand if it is no longer needed",
			"taggedVolumeName", have.volumeName, "hasProof", have.proof != "")
		c.notifyDeleted(bucket, ReasonOwnershipNotProven, "unproven")
		return &csi.DeleteVolumeResponse{}, nil
	}
	if have.authSource == volumecontext.AuthenticationSourceSecret && authSource != volumecontext.AuthenticationSourceSecret {
		return nil, status.Errorf(codes.FailedPrecondition,
			"volume %q (bucket %q) was created with a provisioner secret and DeleteVolume received none; it is not deleted with the driver's credentials. "+
				"Give the PersistentVolume %q the annotations volume.kubernetes.io/provisioner-deletion-secret-name and volume.kubernetes.io/provisioner-deletion-secret-namespace "+
				"naming the Secret its StorageClass named in csi.storage.k8s.io/provisioner-secret-name and -namespace (or restore that StorageClass), and the deletion is retried",
			have.volumeName, bucket, have.volumeName)
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
	c.notifyDeleted(bucket, ReasonDeleted, have.createdAt)
	return &csi.DeleteVolumeResponse{}, nil
}

// readTagsWhat names the failed read of the tags; a refusal of the driver's credentials says
// they were used because the request had no provisioner secret, the usual cause being a bucket
// of another account.
func readTagsWhat(bucket, authSource string, err error) string {
	what := fmt.Sprintf("read the tags of bucket %q", bucket)
	if authSource == volumecontext.AuthenticationSourceDriver && (isAuthError(err) || isDenied(err)) {
		what += " with the driver's credentials (DeleteVolume received no provisioner secret; a bucket created with one needs it)"
	}
	return what
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

// notifyDeleted publishes volume.deleted; idPart makes the event id of one outcome stable
// across retries.
func (c *Controller) notifyDeleted(bucket, reason, idPart string) {
	c.notify(&eventspb.VolumeDeleted{
		VolumeId: bucket, BucketName: bucket, BucketDeleted: reason == ReasonDeleted, Reason: reason,
	}, bucket, idPart)
}
