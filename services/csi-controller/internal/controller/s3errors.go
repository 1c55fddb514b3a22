package controller

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/cabundle"

	"github.com/s3csi/s3csi/services/csi-controller/internal/metrics"
)

// S3 error codes the controller acts on.
const (
	codeNoSuchBucket            = "NoSuchBucket"
	codeNoSuchTagSet            = "NoSuchTagSet"
	codeNoSuchTagSetError       = "NoSuchTagSetError"
	codeBucketNotEmpty          = "BucketNotEmpty"
	codeBucketAlreadyOwnedByYou = "BucketAlreadyOwnedByYou"
	codeBucketAlreadyExists     = "BucketAlreadyExists"
	codeNotFound                = "NotFound"
)

// apiCode returns the S3 error code of err, or "" when err is not an S3 error response. A HEAD
// request has no body, so its 404 and 403 arrive as "NotFound" and "Forbidden".
func apiCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// httpStatus returns the HTTP status of an S3 error response, or 0.
func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func isNoSuchBucket(err error) bool {
	c := apiCode(err)
	return c == codeNoSuchBucket || (c == codeNotFound && httpStatus(err) == http.StatusNotFound)
}

func isNoSuchTagSet(err error) bool {
	c := apiCode(err)
	return c == codeNoSuchTagSet || c == codeNoSuchTagSetError
}

// outcome classifies an S3 call's result for the metrics.
func outcome(err error) string {
	switch {
	case err == nil:
		return metrics.OutcomeSuccess
	case isNoSuchBucket(err) || isNoSuchTagSet(err):
		return metrics.OutcomeNotFound
	case isAuthError(err):
		return metrics.OutcomeAuth
	case isDenied(err):
		return metrics.OutcomeDenied
	case apiCode(err) == codeBucketNotEmpty || apiCode(err) == codeBucketAlreadyExists ||
		apiCode(err) == codeBucketAlreadyOwnedByYou:
		return metrics.OutcomeConflict
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return metrics.OutcomeTimeout
	case isUnreachable(err):
		return metrics.OutcomeUnreachable
	}
	return metrics.OutcomeError
}

// isAuthError reports credentials the endpoint does not accept: unknown key, wrong secret,
// expired or malformed session token.
func isAuthError(err error) bool {
	switch apiCode(err) {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
		"TokenRefreshRequired", "InvalidSecurity", "AuthorizationHeaderMalformed",
		"XAdminUserNotFound": // versitygw's answer to an unknown access key
		return true
	}
	return false
}

// isDenied reports valid credentials that lack a permission. A HEAD request's 403 has no body,
// so it is counted here too, although a wrong secret also causes it.
func isDenied(err error) bool {
	switch apiCode(err) {
	case "AccessDenied", "AllAccessDisabled", "Forbidden":
		return true
	}
	return apiCode(err) == "" && httpStatus(err) == http.StatusForbidden
}

func isUnreachable(err error) bool {
	var netErr net.Error
	var opErr *net.OpError
	return errors.As(err, &opErr) || errors.As(err, &netErr)
}

// s3Status turns an S3 failure during what into a gRPC status with the code the sidecar acts
// on and a message that tells the operator what to check.
func s3Status(err error, what string) error {
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "%s: the S3 endpoint did not answer in time: %v", what, err)
	case errors.Is(err, context.Canceled):
		return status.Errorf(codes.Canceled, "%s: %v", what, err)
	case isAuthError(err):
		return status.Errorf(codes.Unauthenticated,
			"%s: the S3 endpoint refused the credentials; check access_key_id, secret_access_key and session_token in the provisioner secret (or the driver's credentials): %v", what, err)
	case isDenied(err):
		return status.Errorf(codes.PermissionDenied,
			"%s: the S3 endpoint denied access; check the permissions of the access key in use (or a wrong secret key, for HEAD requests): %v", what, err)
	case apiCode(err) == "InvalidBucketName":
		return status.Errorf(codes.InvalidArgument, "%s: %v", what, err)
	case apiCode(err) == "TooManyBuckets":
		return status.Errorf(codes.ResourceExhausted, "%s: the account holds the most buckets it may: %v", what, err)
	case cabundle.Untrusted(err):
		// Before isUnreachable, which a TLS failure matches too: the endpoint answered, with a
		// certificate only the operator can make trusted.
		return status.Errorf(codes.FailedPrecondition, "%s: %s (the csi-controller's --s3-ca-bundle): %v", what, cabundle.Hint, err)
	case isUnreachable(err):
		return status.Errorf(codes.Unavailable, "%s: cannot reach the S3 endpoint; check --s3-endpoint, DNS and the network: %v", what, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}
