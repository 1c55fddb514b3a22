package csiserver

import (
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Redacted replaces every secret and every volume or publish context value in a sanitized
// message.
const Redacted = "***stripped***"

// contextFields are maps whose values are never logged: users put anything in a volume
// context (and kubelet puts service account tokens there), so only their keys are shown.
var contextFields = map[protoreflect.Name]bool{"volume_context": true, "publish_context": true}

// Sanitize renders a message for a log line: every field the CSI spec marks csi_secret has its
// values replaced by Redacted, and so has every volume or publish context. Keys stay visible,
// so a missing key can be diagnosed. m itself is not modified.
func Sanitize(m proto.Message) string {
	if m == nil || !m.ProtoReflect().IsValid() {
		return "null"
	}
	c := proto.Clone(m)
	sanitize(c.ProtoReflect())
	b, err := protojson.MarshalOptions{}.Marshal(c)
	if err != nil {
		return "<unprintable>"
	}
	return string(b)
}

func sanitize(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case isSecret(fd):
			redact(m, fd, v)
		case fd.IsMap() && contextFields[fd.Name()] && fd.MapValue().Kind() == protoreflect.StringKind:
			redact(m, fd, v)
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
				sanitize(e.Message())
				return true
			})
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				sanitize(v.List().Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap() && !fd.IsList():
			sanitize(v.Message())
		}
		return true
	})
}

// SecretValues returns the non-empty values of every csi_secret field of m, longest first, so
// that cutting them out of a text never leaves the tail of a longer one.
func SecretValues(m proto.Message) []string {
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil
	}
	var out []string
	collectSecrets(m.ProtoReflect(), &out)
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

func collectSecrets(m protoreflect.Message, out *[]string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case isSecret(fd) && fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind:
			v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
				if s := e.String(); strings.TrimSpace(s) != "" {
					*out = append(*out, s)
				}
				return true
			})
		case isSecret(fd) && fd.Kind() == protoreflect.StringKind && !fd.IsList():
			if s := v.String(); strings.TrimSpace(s) != "" {
				*out = append(*out, s)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
				collectSecrets(e.Message(), out)
				return true
			})
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				collectSecrets(v.List().Get(i).Message(), out)
			}
		case fd.Message() != nil && !fd.IsMap() && !fd.IsList():
			collectSecrets(v.Message(), out)
		}
		return true
	})
}

func isSecret(fd protoreflect.FieldDescriptor) bool {
	opts := fd.Options()
	if opts == nil || !proto.HasExtension(opts, csi.E_CsiSecret) {
		return false
	}
	secret, ok := proto.GetExtension(opts, csi.E_CsiSecret).(bool)
	return ok && secret
}

// redact replaces the values of a map (keys stay), a string, or clears anything else.
func redact(m protoreflect.Message, fd protoreflect.FieldDescriptor, v protoreflect.Value) {
	switch {
	case fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind:
		mp := v.Map()
		var keys []protoreflect.MapKey
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		for _, k := range keys {
			mp.Set(k, protoreflect.ValueOfString(Redacted))
		}
	case fd.Kind() == protoreflect.StringKind && !fd.IsList():
		m.Set(fd, protoreflect.ValueOfString(Redacted))
	default:
		m.Clear(fd)
	}
}
