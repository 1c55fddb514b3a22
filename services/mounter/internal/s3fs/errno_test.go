package s3fs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func TestToErrno(t *testing.T) {
	// A connection reset as the SDK returns it after its retries.
	reset := &smithy.OperationError{ServiceID: "S3", OperationName: "UploadPart",
		Err: &smithyhttp.RequestSendError{Err: &net.OpError{Op: "write", Net: "tcp",
			Err: os.NewSyscallError("write", syscall.ECONNRESET)}}}
	for _, c := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"no error", nil, 0},
		{"a connection reset is S3 not answering", reset, syscall.EIO},
		{"a connection refused", fmt.Errorf("put k: %w", &net.OpError{Op: "dial", Net: "tcp",
			Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), syscall.EIO},
		{"a local errno passes", fmt.Errorf("cache: %w", syscall.ENOSPC), syscall.ENOSPC},
		{"access denied", &smithy.GenericAPIError{Code: "AccessDenied"}, syscall.EACCES},
		{"no such key", &smithy.GenericAPIError{Code: "NoSuchKey"}, syscall.ENOENT},
		{"interrupted", fmt.Errorf("get k: %w", context.Canceled), syscall.EINTR},
		{"interrupted while dialing", &net.OpError{Op: "dial", Net: "tcp", Err: context.Canceled}, syscall.EINTR},
		{"anything else", errors.New("unexpected"), syscall.EIO},
	} {
		if got := toErrno(c.err); got != c.want {
			t.Errorf("%s: toErrno(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
