package controller

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/s3csi/s3csi/services/csi-controller/internal/metrics"
)

// S3API is the part of the S3 client the controller uses; *s3.Client implements it.
type S3API interface {
	HeadBucket(ctx context.Context, in *s3.HeadBucketInput, opts ...func(*s3.Options)) (*s3.HeadBucketOutput, error)
	CreateBucket(ctx context.Context, in *s3.CreateBucketInput, opts ...func(*s3.Options)) (*s3.CreateBucketOutput, error)
	DeleteBucket(ctx context.Context, in *s3.DeleteBucketInput, opts ...func(*s3.Options)) (*s3.DeleteBucketOutput, error)
	GetBucketTagging(ctx context.Context, in *s3.GetBucketTaggingInput, opts ...func(*s3.Options)) (*s3.GetBucketTaggingOutput, error)
	PutBucketTagging(ctx context.Context, in *s3.PutBucketTaggingInput, opts ...func(*s3.Options)) (*s3.PutBucketTaggingOutput, error)
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, opts ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput, opts ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error)
	ListMultipartUploads(ctx context.Context, in *s3.ListMultipartUploadsInput, opts ...func(*s3.Options)) (*s3.ListMultipartUploadsOutput, error)
	AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, opts ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

// Tags that mark a bucket as created by s3csi for one volume. S3 bucket tags are metadata of
// the bucket itself: they add no object, so an empty volume's bucket stays empty. Anyone allowed
// to tag the bucket can write them; TagOwnershipProof is what only the csi-controller can.
const (
	TagVolumeName           = "s3csi.scality.com/volume-name"
	TagParameters           = "s3csi.scality.com/parameters"
	TagCapacity             = "s3csi.scality.com/capacity-bytes"
	TagEmptyOnDelete        = "s3csi.scality.com/empty-on-delete"
	TagCreatedAt            = "s3csi.scality.com/created-at"
	TagAuthenticationSource = "s3csi.scality.com/authentication-source"
	TagOwnershipProof       = "s3csi.scality.com/ownership-proof"
)

// ownership is what the tags of a bucket say about it.
type ownership struct {
	// owned is true when the bucket carries TagVolumeName: s3csi's tags, which anyone allowed
	// to tag the bucket could have written (see Controller.proven).
	owned         bool
	volumeName    string
	parameters    string
	capacity      int64
	emptyOnDelete bool
	createdAt     string
	// authSource is volumecontext.AuthenticationSourceSecret when CreateVolume had a provisioner
	// secret, else AuthenticationSourceDriver; DeleteVolume must then have one too.
	authSource string
	proof      string
}

// signed returns every tag value but the proof, with the bucket: what the proof covers.
func (o ownership) signed(bucket string) []string {
	return []string{
		bucket, o.volumeName, o.parameters, strconv.FormatInt(o.capacity, 10),
		strconv.FormatBool(o.emptyOnDelete), o.createdAt, o.authSource,
	}
}

func (o ownership) tags() []types.Tag {
	return []types.Tag{
		{Key: aws.String(TagVolumeName), Value: aws.String(o.volumeName)},
		{Key: aws.String(TagParameters), Value: aws.String(o.parameters)},
		{Key: aws.String(TagCapacity), Value: aws.String(strconv.FormatInt(o.capacity, 10))},
		{Key: aws.String(TagEmptyOnDelete), Value: aws.String(strconv.FormatBool(o.emptyOnDelete))},
		{Key: aws.String(TagCreatedAt), Value: aws.String(o.createdAt)},
		{Key: aws.String(TagAuthenticationSource), Value: aws.String(o.authSource)},
		{Key: aws.String(TagOwnershipProof), Value: aws.String(o.proof)},
	}
}

// parseOwnership reads the tags. The proof covers the values read, not the text of the tags:
// "0010" for "10" changes nothing the controller does.
func parseOwnership(tags []types.Tag) ownership {
	var o ownership
	for _, t := range tags {
		v := aws.ToString(t.Value)
		switch aws.ToString(t.Key) {
		case TagVolumeName:
			o.owned, o.volumeName = true, v
		case TagParameters:
			o.parameters = v
		case TagCapacity:
			o.capacity, _ = strconv.ParseInt(v, 10, 64)
		case TagEmptyOnDelete:
			o.emptyOnDelete = v == "true"
		case TagCreatedAt:
			o.createdAt = v
		case TagAuthenticationSource:
			o.authSource = v
		case TagOwnershipProof:
			o.proof = v
		}
	}
	return o
}

// bucketOps runs S3 calls for one RPC with one client, recording each in the metrics.
type bucketOps struct {
	api     S3API
	metrics *metrics.Metrics
}

func (b bucketOps) observe(op string, start time.Time, err error) {
	b.metrics.ObserveS3(op, outcome(err), time.Since(start))
}

// exists reports whether the bucket exists; errors other than "not found" are returned.
func (b bucketOps) exists(ctx context.Context, bucket string) (bool, error) {
	start := time.Now()
	_, err := b.api.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)})
	b.observe("HeadBucket", start, err)
	if isNoSuchBucket(err) {
		return false, nil
	}
	return err == nil, err
}

// create creates the bucket; it reports false, nil when the bucket already exists and is ours
// (the S3 answer to a retried create).
func (b bucketOps) create(ctx context.Context, bucket string) (bool, error) {
	start := time.Now()
	_, err := b.api.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	b.observe("CreateBucket", start, err)
	if apiCode(err) == codeBucketAlreadyOwnedByYou {
		return false, nil
	}
	return err == nil, err
}

// ownership reads the bucket's tags; a bucket without tags is not owned.
func (b bucketOps) ownership(ctx context.Context, bucket string) (ownership, error) {
	start := time.Now()
	out, err := b.api.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String(bucket)})
	b.observe("GetBucketTagging", start, err)
	if isNoSuchTagSet(err) {
		return ownership{}, nil
	}
	if err != nil {
		return ownership{}, err
	}
	return parseOwnership(out.TagSet), nil
}

func (b bucketOps) tag(ctx context.Context, bucket string, o ownership) error {
	start := time.Now()
	_, err := b.api.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{
		Bucket: aws.String(bucket), Tagging: &types.Tagging{TagSet: o.tags()},
	})
	b.observe("PutBucketTagging", start, err)
	return err
}

// isEmpty reports whether the bucket holds no object and no unfinished multipart upload.
func (b bucketOps) isEmpty(ctx context.Context, bucket string) (bool, error) {
	start := time.Now()
	objs, err := b.api.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), MaxKeys: aws.Int32(1)})
	b.observe("ListObjectsV2", start, err)
	if err != nil || len(objs.Contents) > 0 {
		return false, err
	}
	start = time.Now()
	mpus, err := b.api.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), MaxUploads: aws.Int32(1)})
	b.observe("ListMultipartUploads", start, err)
	if err != nil {
		return false, err
	}
	return len(mpus.Uploads) == 0, nil
}

// empty deletes every object and aborts every multipart upload of the bucket, a page at a time.
// A page that starts with the key the previous page started with means the deletes did not
// take effect; it stops there rather than looping.
func (b bucketOps) empty(ctx context.Context, bucket string) error {
	previous := ""
	for {
		start := time.Now()
		page, err := b.api.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		b.observe("ListObjectsV2", start, err)
		if err != nil {
			return fmt.Errorf("list objects: %w", err)
		}
		if len(page.Contents) == 0 {
			break
		}
		first := aws.ToString(page.Contents[0].Key)
		if first == previous {
			return fmt.Errorf("delete objects: %q is still listed after it was deleted", first)
		}
		previous = first
		ids := make([]types.ObjectIdentifier, 0, len(page.Contents))
		for _, o := range page.Contents {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key})
		}
		start = time.Now()
		out, err := b.api.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(bucket), Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		b.observe("DeleteObjects", start, err)
		if err != nil {
			return fmt.Errorf("delete objects: %w", err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("delete object %q: %s: %s", aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message))
		}
	}
	return b.abortUploads(ctx, bucket)
}

func (b bucketOps) abortUploads(ctx context.Context, bucket string) error {
	for {
		start := time.Now()
		page, err := b.api.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
		b.observe("ListMultipartUploads", start, err)
		if err != nil {
			return fmt.Errorf("list multipart uploads: %w", err)
		}
		if len(page.Uploads) == 0 {
			return nil
		}
		for _, u := range page.Uploads {
			start = time.Now()
			_, err := b.api.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
				Bucket: aws.String(bucket), Key: u.Key, UploadId: u.UploadId,
			})
			b.observe("AbortMultipartUpload", start, err)
			if err != nil {
				return fmt.Errorf("abort multipart upload of %q: %w", aws.ToString(u.Key), err)
			}
		}
	}
}

// remove deletes the bucket; a bucket already gone is success.
func (b bucketOps) remove(ctx context.Context, bucket string) error {
	start := time.Now()
	_, err := b.api.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)})
	b.observe("DeleteBucket", start, err)
	if isNoSuchBucket(err) {
		return nil
	}
	return err
}
