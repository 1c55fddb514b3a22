package csiserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/logging"
)

// RPCRecorder records served RPCs; each service's metrics struct implements it.
type RPCRecorder interface {
	// ObserveRPC records one RPC. method is the full gRPC method name, code its outcome.
	ObserveRPC(method string, code codes.Code, d time.Duration)
}

// maxAnswerMargin bounds how long before the caller's deadline a handler's context ends.
const maxAnswerMargin = 5 * time.Second

// Interceptor logs every RPC with its sanitized request and response at Debug and its
// failure at Info, and records its outcome on rec (nil records nothing).
//
// Problem: a handler may wrap an error that quotes a request field, and a secret in it would
// reach both the caller (kubelet events, sidecar logs) and this log. And a handler that waits
// (for an attachment, a Mountpoint Pod) until its deadline explains in vain: the caller's own
// deadline fires at the same instant, so kubelet shows a bare "context deadline exceeded".
// Solution: every secret value of the request is cut out of the error message here; the
// handler's context ends a margin (a tenth of the time left, at most maxAnswerMargin) before
// the caller's deadline, so its answer arrives first.
// Invariant: no secret of a request appears in the log or in the status it returns.
func Interceptor(log logr.Logger, rec RPCRecorder) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		l := log.WithValues("method", info.FullMethod)
		if l.V(logging.Debug).Enabled() {
			l.V(logging.Debug).Info("RPC request", "request", sanitizeAny(req))
		}
		if deadline, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline.Add(-min(maxAnswerMargin, time.Until(deadline)/10)))
			defer cancel()
		}
		resp, err := handler(logr.NewContext(ctx, l), req)
		err = scrubError(err, req)
		code := status.Code(err)
		d := time.Since(start)
		if rec != nil {
			rec.ObserveRPC(info.FullMethod, code, d)
		}
		if err != nil {
			l.Info("RPC failed", "code", code.String(), "error", status.Convert(err).Message(), "duration", d.String())
			return resp, err
		}
		if l.V(logging.Debug).Enabled() {
			l.V(logging.Debug).Info("RPC succeeded", "response", sanitizeAny(resp), "duration", d.String())
		}
		return resp, nil
	}
}

func sanitizeAny(v any) string {
	if m, ok := v.(proto.Message); ok {
		return Sanitize(m)
	}
	return fmt.Sprintf("%T", v)
}

// scrubError returns err with every secret value of req replaced by Redacted in its message,
// keeping its code and details; a status error is rebuilt only when it quotes a secret.
func scrubError(err error, req any) error {
	if err == nil {
		return nil
	}
	m, ok := req.(proto.Message)
	if !ok {
		return err
	}
	secrets := SecretValues(m)
	if len(secrets) == 0 {
		return err
	}
	st := status.Convert(err)
	msg := st.Message()
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, Redacted)
	}
	if msg == st.Message() {
		return err
	}
	p := st.Proto()
	p.Message = msg
	return status.FromProto(p).Err()
}
