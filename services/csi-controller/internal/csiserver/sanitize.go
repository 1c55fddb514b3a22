package csiserver

import (
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/s3csi/s3csi/shared/volumecontext"
)

// Redacted replaces every secret value in a sanitized message.
const Redacted = "***stripped***"

// Sanitize renders a CSI message for a log line: every field the CSI spec marks csi_secret
// (the secrets maps) has its values replaced by Redacted, and volume contexts keep only the
// values volumecontext.Loggable allows. Keys stay visible, so a missing key can be diagnosed.
func Sanitize(m proto.Message) string {
	if m == nil {
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
		case fd.IsMap() && fd.Name() == "volume_context":
			redactContext(v.Map())
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

func isSecret(fd protoreflect.FieldDescriptor) bool {
	opts := fd.Options()
	if opts == nil || !proto.HasExtension(opts, csi.E_CsiSecret) {
		return false
	}
	secret, ok := proto.GetExtension(opts, csi.E_CsiSecret).(bool)
	return ok && secret
}

func redact(m protoreflect.Message, fd protoreflect.FieldDescriptor, v protoreflect.Value) {
	switch {
	case fd.IsMap():
		mp := v.Map()
		for _, k := range mapKeys(mp) {
			mp.Set(k, protoreflect.ValueOfString(Redacted))
		}
	case fd.Kind() == protoreflect.StringKind && !fd.IsList():
		m.Set(fd, protoreflect.ValueOfString(Redacted))
	default:
		m.Clear(fd)
	}
}

func redactContext(mp protoreflect.Map) {
	plain := map[string]string{}
	mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		plain[k.String()] = v.String()
		return true
	})
	for k, v := range volumecontext.Loggable(plain) {
		mp.Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfString(v))
	}
}

func mapKeys(mp protoreflect.Map) []protoreflect.MapKey {
	var keys []protoreflect.MapKey
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, func(a, b protoreflect.MapKey) int {
		switch {
		case a.String() < b.String():
			return -1
		case a.String() > b.String():
			return 1
		}
		return 0
	})
	return keys
}
