package s3fs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/s3csi/s3csi/shared/cabundle"
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
	err := f.listOne(ctx)
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
	return cabundle.Explain(fmt.Errorf("list bucket %q: %w", f.bucket, err))
}

// listOne lists one key under the mount's prefix: a request without a body that every mount may make.
func (f *filesystem) listOne(ctx context.Context) error {
	_, err := f.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket: aws.String(f.bucket), Prefix: aws.String(f.opts.Prefix), MaxKeys: aws.Int32(1),
	})
	return err
}

// sendError is the error of a request that carries a body (a part, a whole object) and failed.
//
// Problem: a server may refuse a request from its headers alone (an unknown or revoked key, no
// permission) and close the connection before it has read the body; the client, still sending,
// sees the connection reset and never reads the refusal (versitygw, which streams request
// bodies, does this). The application then got ECONNRESET, or EACCES, depending on timing.
// Solution: when such a request failed with no answer from S3, the listing checkAccess makes
// (no body, and allowed to every mount) asks again; if S3 refuses it, the request fails with
// that refusal. A request that got an answer keeps its error, and so does one whose listing S3
// allows or does not answer either.
func (f *filesystem) sendError(ctx context.Context, err error) error {
	var unsent *smithyhttp.RequestSendError
	if !errors.As(err, &unsent) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	ctx, cancel := f.requestContext(ctx)
	defer cancel()
	if listErr := f.listOne(ctx); listErr != nil && toErrno(listErr) == syscall.EACCES {
		return fmt.Errorf("%w (the request before it had no answer: %v)", listErr, err) //nolint:errorlint // the refusal decides the errno
	}
	return err
}
