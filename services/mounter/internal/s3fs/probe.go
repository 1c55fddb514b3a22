package s3fs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// checkAccess lists one key under the mount's prefix.
//
// Problem: S3 is first asked when an application looks at the mount, so a missing bucket or keys
// S3 refuses would give a mount that serves nothing but EACCES or ENOENT, while the publish that
// made it succeeded and the pod runs as if all were well.
// Solution: the mount is refused when this listing fails, with what S3 said; the operator sees it
// in the workload's FailedMount event. Listing is what every directory read needs anyway.
// Invariant: a mount that serves could list its prefix once.
func (f *filesystem) checkAccess(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	_, err := f.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket: aws.String(f.bucket), Prefix: aws.String(f.opts.Prefix), MaxKeys: aws.Int32(1),
	})
	if err == nil {
		return nil
	}
	code := "no answer"
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	switch toErrno(err) {
	case syscall.EACCES:
		return fmt.Errorf("S3 refused to list bucket %q (%s): check the access key and secret key the volume uses, and that they may list the bucket", f.bucket, code)
	case syscall.ENOENT:
		return fmt.Errorf("bucket %q does not exist (%s)", f.bucket, code)
	}
	return fmt.Errorf("list bucket %q: %w", f.bucket, err)
}
