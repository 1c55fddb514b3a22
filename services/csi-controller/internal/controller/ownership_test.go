package controller_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/csi-controller/internal/controller"
)

// Anyone allowed to tag a bucket can write s3csi's tags on it. These tests play that someone:
// a PersistentVolume pointing at their bucket must not make DeleteVolume delete or empty it.
func TestDeleteVolumeKeepsABucketWhoseOwnershipItCannotProve(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name string
		// setup returns a bucket holding an object, tagged by someone other than this controller.
		setup func(t *testing.T) string
	}{
		{
			name: "a bucket with forged s3csi tags asking for it to be emptied is kept with its data",
			setup: func(t *testing.T) string {
				b := foreignBucket(t, e.s3, "forged")
				putTags(t, e.s3, b, map[string]string{
					controller.TagVolumeName: "pvc-forged", controller.TagEmptyOnDelete: "true",
					controller.TagCreatedAt: "2025-01-01T00:00:00Z",
				})
				return b
			},
		},
		{
			name: "a bucket carrying every tag copied from a bucket s3csi created is kept with its data",
			setup: func(t *testing.T) string {
				owned := mustCreate(t, e, "pvc-copied-from", map[string]string{"emptyBucketOnDelete": "true"})
				b := foreignBucket(t, e.s3, "copied")
				putTags(t, e.s3, b, tagsOf(t, e.s3, owned))
				return b
			},
		},
		{
			name: "a bucket created by a csi-controller with another key is kept with its data",
			setup: func(t *testing.T) string {
				other := newEnv(t, e.s3, withOwnershipKeys(t, []byte("another installation's key, 32 b")))
				b := mustCreate(t, other, "pvc-other-key", map[string]string{"emptyBucketOnDelete": "true"})
				putObject(t, e.s3, b, "precious")
				return b
			},
		},
		{
			name: "a bucket of this controller whose empty-on-delete tag was turned on afterwards is kept with its data",
			setup: func(t *testing.T) string {
				b := mustCreate(t, e, "pvc-tampered", nil)
				putObject(t, e.s3, b, "precious")
				tags := tagsOf(t, e.s3, b)
				tags[controller.TagEmptyOnDelete] = "true"
				putTags(t, e.s3, b, tags)
				return b
			},
		},
		{
			name: "a bucket tagged by an s3csi release without ownership proofs is kept with its data",
			setup: func(t *testing.T) string {
				b := mustCreate(t, e, "pvc-before-proofs", map[string]string{"emptyBucketOnDelete": "true"})
				putObject(t, e.s3, b, "precious")
				tags := tagsOf(t, e.s3, b)
				delete(tags, controller.TagOwnershipProof)
				delete(tags, controller.TagAuthenticationSource)
				putTags(t, e.s3, b, tags)
				return b
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.setup(t)
			for range 2 {
				if _, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: b}); err != nil {
					t.Fatalf("DeleteVolume() = %v, want success: the bucket is not the controller's to delete", err)
				}
			}
			assertKeptWithData(t, e.s3, b)
		})
	}
}

func TestAKeptBucketIsAnnouncedWithTheReason(t *testing.T) {
	bus := testenv.StartNATS(t)
	o, js := startOutbox(t, bus.URL())
	e := newEnv(t, nil, withNotifier(o))
	b := foreignBucket(t, e.s3, "announced")
	putTags(t, e.s3, b, map[string]string{controller.TagVolumeName: "pvc-announced"})
	if _, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: b}); err != nil {
		t.Fatalf("DeleteVolume() = %v", err)
	}
	got := streamEvents(t, js, 1)
	deleted, ok := got[0].Payload.(*eventspb.VolumeDeleted)
	if !ok || deleted.GetVolumeId() != b || deleted.GetBucketDeleted() || deleted.GetReason() != controller.ReasonOwnershipNotProven {
		t.Errorf("event = %v, want volume.deleted of %s, bucket kept, reason %s", got[0].Payload, b, controller.ReasonOwnershipNotProven)
	}
}

// CreateVolume never takes over a bucket holding data on the strength of tags it did not sign.
func TestCreateVolumeTrustsOnlyTagsItSigned(t *testing.T) {
	e := newEnv(t, nil)
	t.Run("a bucket of the volume's name with forged tags and data is refused", func(t *testing.T) {
		name := "pvc-prepared-trap"
		b := controller.BucketName(testPrefix, name)
		if err := e.s3.CreateBucket(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		putObject(t, e.s3, b, "precious")
		putTags(t, e.s3, b, map[string]string{controller.TagVolumeName: name})
		_, err := e.ctrl.CreateVolume(testContext(t), createReq(name))
		wantCode(t, err, codes.AlreadyExists)
		if !strings.Contains(err.Error(), "ownership proof") {
			t.Errorf("error = %v, want it to say the proof is missing", err)
		}
	})
	t.Run("an empty bucket of the volume's name with forged tags is signed, and then deleted", func(t *testing.T) {
		name := "pvc-empty-forged"
		b := controller.BucketName(testPrefix, name)
		if err := e.s3.CreateBucket(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		putTags(t, e.s3, b, map[string]string{controller.TagVolumeName: name, controller.TagEmptyOnDelete: "true"})
		id := mustCreate(t, e, name, nil)
		if got := tagsOf(t, e.s3, id); got[controller.TagEmptyOnDelete] != "false" || got[controller.TagOwnershipProof] == "" {
			t.Errorf("tags = %v, want this request's, signed", got)
		}
		if _, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("DeleteVolume() = %v", err)
		}
		if bucketExists(t, e.s3, id) {
			t.Errorf("bucket %s was kept", id)
		}
	})
	t.Run("the signed tags record the credential source and a proof", func(t *testing.T) {
		tags := tagsOf(t, e.s3, mustCreate(t, e, "pvc-signed", nil))
		if tags[controller.TagAuthenticationSource] != "driver" || len(tags[controller.TagOwnershipProof]) != 64 {
			t.Errorf("tags = %v", tags)
		}
	})
}

// A bucket created with a provisioner secret is deleted with that secret only: never with the
// driver's credentials, even when they could.
func TestDeleteVolumeNeedsTheSecretTheBucketWasCreatedWith(t *testing.T) {
	e := newEnv(t, nil) // the driver's credentials are the same account's: they could delete it
	secrets := map[string]string{"access_key_id": e.s3.AccessKey, "secret_access_key": e.s3.SecretKey}
	resp, err := e.ctrl.CreateVolume(testContext(t), createReq("pvc-secret-only", withSecrets(secrets)))
	if err != nil {
		t.Fatalf("CreateVolume() = %v", err)
	}
	id := resp.GetVolume().GetVolumeId()

	_, err = e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, err, codes.FailedPrecondition)
	for _, want := range []string{"provisioner secret", "pvc-secret-only", "volume.kubernetes.io/provisioner-deletion-secret-name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to mention %q", err, want)
		}
	}
	if !bucketExists(t, e.s3, id) {
		t.Fatalf("bucket %s was deleted with the driver's credentials", id)
	}
	if _, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets}); err != nil {
		t.Fatalf("DeleteVolume() with the secret = %v", err)
	}
	if bucketExists(t, e.s3, id) {
		t.Errorf("bucket %s is still there after DeleteVolume with its secret", id)
	}
}

func TestDeleteVolumeOfADriverCredentialsBucketRefusesASecret(t *testing.T) {
	e := newEnv(t, nil)
	resp, err := e.ctrl.CreateVolume(testContext(t), createReq("pvc-driver-only"))
	if err != nil {
		t.Fatalf("CreateVolume() = %v", err)
	}
	id := resp.GetVolume().GetVolumeId()
	// Keys that S3 accepts for the bucket, but not the credentials the volume was created with.
	secrets := map[string]string{"access_key_id": e.s3.AccessKey, "secret_access_key": e.s3.SecretKey}
	_, err = e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets})
	wantCode(t, err, codes.FailedPrecondition)
	for _, want := range []string{"driver's credentials", "pvc-driver-only", "volume.kubernetes.io/provisioner-deletion-secret-name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to mention %q", err, want)
		}
	}
	if !bucketExists(t, e.s3, id) {
		t.Fatalf("bucket %s was deleted with a provisioner secret its StorageClass did not name", id)
	}
	if _, err := e.ctrl.DeleteVolume(testContext(t), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("DeleteVolume() with the driver's credentials = %v", err)
	}
	if bucketExists(t, e.s3, id) {
		t.Errorf("bucket %s is still there after DeleteVolume with the driver's credentials", id)
	}
}

// foreignBucket creates a bucket with the root account, outside the controller, holding one
// object.
func foreignBucket(t *testing.T, srv *testenv.S3, name string) string {
	t.Helper()
	b := "foreign-" + name
	if err := srv.CreateBucket(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	putObject(t, srv, b, "precious")
	return b
}

func putTags(t *testing.T, srv *testenv.S3, bucket string, tags map[string]string) {
	t.Helper()
	set := make([]types.Tag, 0, len(tags))
	for k, v := range tags {
		set = append(set, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	_, err := srv.RootClient().PutBucketTagging(t.Context(), &s3.PutBucketTaggingInput{
		Bucket: aws.String(bucket), Tagging: &types.Tagging{TagSet: set},
	})
	if err != nil {
		t.Fatalf("tag bucket %s: %v", bucket, err)
	}
}

func tagsOf(t *testing.T, srv *testenv.S3, bucket string) map[string]string {
	t.Helper()
	out, err := srv.RootClient().GetBucketTagging(t.Context(), &s3.GetBucketTaggingInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("read the tags of %s: %v", bucket, err)
	}
	tags := map[string]string{}
	for _, tag := range out.TagSet {
		tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
	}
	return tags
}

func assertKeptWithData(t *testing.T, srv *testenv.S3, bucket string) {
	t.Helper()
	if !bucketExists(t, srv, bucket) {
		t.Fatalf("bucket %s was deleted", bucket)
	}
	out, err := srv.RootClient().ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("list %s: %v", bucket, err)
	}
	if len(out.Contents) != 1 || aws.ToString(out.Contents[0].Key) != "precious" {
		t.Errorf("bucket %s holds %d objects, want only precious", bucket, len(out.Contents))
	}
}
