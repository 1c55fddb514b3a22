package csi

import (
	"context"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/s3csi/s3csi/shared/logging"
)

// redacted replaces every secret value in logged requests.
const redacted = "***stripped***"

// Sanitize returns a copy of m fit for a log: every field the CSI spec marks csi_secret is
// replaced, and volume contexts are dropped whole, because users put anything in them.
func Sanitize(m proto.Message) proto.Message {
	c := proto.Clone(m)
	sanitize(c.ProtoReflect())
	return c
}

func sanitize(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case isSecret(fd):
			switch {
			case fd.IsMap():
				mp := m.Mutable(fd).Map()
				mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
					mp.Set(k, protoreflect.ValueOfString(redacted))
					return true
				})
			case fd.Kind() == protoreflect.StringKind:
				m.Set(fd, protoreflect.ValueOfString(redacted))
			default:
				m.Clear(fd)
			}
		case fd.Name() == "volume_context" || fd.Name() == "publish_context":
			m.Clear(fd)
		case fd.Message() != nil && fd.IsList():
			l := v.List()
			for i := range l.Len() {
				sanitize(l.Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			sanitize(v.Message())
		}
		return true
	})
}

func isSecret(fd protoreflect.FieldDescriptor) bool {
	opts := fd.Options()
	if opts == nil {
		return false
	}
	secret, ok := proto.GetExtension(opts, csi.E_CsiSecret).(bool)
	return ok && secret
}

// RPCRecorder records served RPCs.
type RPCRecorder interface {
	RPC(method, code string, d time.Duration)
}

// LoggingInterceptor logs every RPC with its sanitized request at Debug, its failure at Info,
// and records its outcome.
func LoggingInterceptor(log logr.Logger, rec RPCRecorder) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		l := log.WithValues("method", info.FullMethod)
		if m, ok := req.(proto.Message); ok && l.V(logging.Debug).Enabled() {
			l.V(logging.Debug).Info("CSI call", "request", protojson.Format(Sanitize(m)))
		}
		resp, err := handler(logr.NewContext(ctx, l), req)
		code := status.Code(err)
		if rec != nil {
			rec.RPC(info.FullMethod, code.String(), time.Since(start))
		}
		if err != nil {
			l.Info("CSI call failed", "code", code.String(), "error", status.Convert(err).Message(), "duration", time.Since(start).String())
		} else {
			l.V(logging.Debug).Info("CSI call succeeded", "duration", time.Since(start).String())
		}
		return resp, err
	}
}
