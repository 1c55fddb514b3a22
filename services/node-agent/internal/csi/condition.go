package csi

import (
	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
)

// Problem: kubelet (every release through 1.34, built on CSI spec 1.9) learns a volume's
// health from the VOLUME_CONDITION node capability (value 4) and the volume_condition field
// (number 2) of NodeGetVolumeStatsResponse, but CSI spec 1.13, which this driver's Go bindings
// follow, removed both as an alpha API (they are reserved there), so its generated types cannot
// carry them.
// Solution: advertise value 4 by number and append field 2, a VolumeCondition message
// {bool abnormal = 1; string message = 2;}, to the response as protobuf wire bytes: exactly
// what a spec 1.9 server sends.
// Invariant: the bytes decode as spec 1.9's NodeGetVolumeStatsResponse.volume_condition; a
// spec 1.13 reader ignores them as an unknown field.

// capVolumeCondition is spec 1.9's NodeServiceCapability.RPC.Type VOLUME_CONDITION.
const capVolumeCondition csi.NodeServiceCapability_RPC_Type = 4

// volumeConditionField is spec 1.9's NodeGetVolumeStatsResponse.volume_condition.
const volumeConditionField protowire.Number = 2

// withCondition sets rsp's volume condition (spec 1.9 wire format) and returns rsp.
func withCondition(rsp *csi.NodeGetVolumeStatsResponse, abnormal bool, message string) *csi.NodeGetVolumeStatsResponse {
	var cond []byte
	if abnormal {
		cond = protowire.AppendTag(cond, 1, protowire.VarintType)
		cond = protowire.AppendVarint(cond, 1)
	}
	if message != "" {
		cond = protowire.AppendTag(cond, 2, protowire.BytesType)
		cond = protowire.AppendString(cond, message)
	}
	field := protowire.AppendTag(nil, volumeConditionField, protowire.BytesType)
	field = protowire.AppendBytes(field, cond)
	rsp.ProtoReflect().SetUnknown(field)
	return rsp
}

// VolumeCondition reads the volume condition of a NodeGetVolumeStatsResponse as kubelet reads
// it (spec 1.9 wire format); ok is false when the response carries none.
func VolumeCondition(rsp *csi.NodeGetVolumeStatsResponse) (abnormal bool, message string, ok bool) {
	b := []byte(rsp.ProtoReflect().GetUnknown())
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, "", false
		}
		b = b[n:]
		if num != volumeConditionField || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false, "", false
			}
			b = b[n:]
			continue
		}
		cond, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false, "", false
		}
		b = b[n:]
		abnormal, message, ok = false, "", true
		for len(cond) > 0 {
			cnum, ctyp, cn := protowire.ConsumeTag(cond)
			if cn < 0 {
				return false, "", false
			}
			cond = cond[cn:]
			switch {
			case cnum == 1 && ctyp == protowire.VarintType:
				v, vn := protowire.ConsumeVarint(cond)
				if vn < 0 {
					return false, "", false
				}
				abnormal, cond = v != 0, cond[vn:]
			case cnum == 2 && ctyp == protowire.BytesType:
				s, sn := protowire.ConsumeString(cond)
				if sn < 0 {
					return false, "", false
				}
				message, cond = s, cond[sn:]
			default:
				vn := protowire.ConsumeFieldValue(cnum, ctyp, cond)
				if vn < 0 {
					return false, "", false
				}
				cond = cond[vn:]
			}
		}
	}
	return abnormal, message, ok
}
