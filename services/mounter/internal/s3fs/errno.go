package s3fs

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

// toErrno maps an S3 request error to the errno an application sees. The SDK has already retried
// throttling and server errors with backoff; what arrives here is final.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	// A failed connection (reset, refused, unreachable) is S3 not answering: EIO, as for a
	// timeout. The errno inside it describes a socket; passed through, it told the application
	// that its file was a connection (ECONNRESET from close).
	var netErr *net.OpError
	if errors.As(err, &netErr) && !errors.Is(err, context.Canceled) {
		return syscall.EIO
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchBucket", "NoSuchUpload":
			return syscall.ENOENT
		case "AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
			"ExpiredToken", "InvalidToken", "InvalidObjectState", "AllAccessDisabled",
			"XAdminUserNotFound": // versitygw: unknown access key, answered with 404
			return syscall.EACCES
		}
	}
	var respErr *awshttp.ResponseError
	if errors.As(err, &respErr) {
		switch respErr.HTTPStatusCode() {
		case http.StatusNotFound:
			return syscall.ENOENT
		case http.StatusForbidden:
			return syscall.EACCES
		}
	}
	if errors.Is(err, context.Canceled) {
		return syscall.EINTR
	}
	return syscall.EIO
}
