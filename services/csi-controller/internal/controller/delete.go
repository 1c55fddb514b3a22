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
// buckets silently. A bucket must not be deleted with credentials its StorageClass did not name
// (the driver's because the provisioner secret went missing, or a Secret's for a bucket made with
// the driver's).
// Solution: only a bucket whose tags carry a valid ownership proof (see proven) is deleted; a
// non-empty one only when its StorageClass opted in at creation (the signed tags record it),
// else FAILED_PRECONDITION tells the operator what to do and the provisioner retries; a bucket is
// deleted only with the authentication source it was created with (sameCredentials); credential
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
	if err := sameCredentials(bucket, have, authSource); err != nil {
		return nil, err
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

// sameCredentials returns FAILED_PRECONDITION unless DeleteVolume has the kind of credentials
// the bucket was created with: a provisioner secret for a bucket created with one, the driver's
// credentials for a bucket created with them.
//
// Problem: the secret DeleteVolume receives comes from the PersistentVolume's deletion-secret
// annotations, which can name another Secret than the StorageClass did, or vanish; deleting a
// secret's bucket with the driver's (often wider) credentials, or a driver's bucket with some
// Secret's, acts with credentials the StorageClass never named.
// Solution: the signed tags record the authentication source; a request with the other one is
// refused with the annotations to fix. The access key itself is not compared, so rotating the
// keys of the named Secret or of the driver keeps its buckets deletable; S3 decides whether
// those keys may delete the bucket.
// Invariant: a bucket is deleted only with the authentication source it was created with.
func sameCredentials(bucket string, have ownership, authSource string) error {
	if have.authSource == authSource {
		return nil
	}
	if have.authSource == volumecontext.AuthenticationSourceSecret {
		return status.Errorf(codes.FailedPrecondition,
			"volume %q (bucket %q) was created with a provisioner secret and DeleteVolume received none; it is not deleted with the driver's credentials. "+
				"Give the PersistentVolume %q the annotations volume.kubernetes.io/provisioner-deletion-secret-name and volume.kubernetes.io/provisioner-deletion-secret-namespace "+
				"naming the Secret its StorageClass named in csi.storage.k8s.io/provisioner-secret-name and -namespace (or restore that StorageClass), and the deletion is retried",
			have.volumeName, bucket, have.volumeName)
	}
	return status.Errorf(codes.FailedPrecondition,
		"volume %q (bucket %q) was created with the driver's credentials and DeleteVolume received a provisioner secret; it is not deleted with credentials its StorageClass did not name. "+
			"Remove the annotations volume.kubernetes.io/provisioner-deletion-secret-name and volume.kubernetes.io/provisioner-deletion-secret-namespace from the PersistentVolume %q, and the deletion is retried",
		have.volumeName, bucket, have.volumeName)
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
