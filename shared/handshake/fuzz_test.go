package handshake

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzReadRequest feeds arbitrary frames to the mounter's decoder: it must refuse or accept
// without panicking, and an accepted request must be valid.
func FuzzReadRequest(f *testing.F) {
	good, _ := EncodeFrame(&Request{Version: Version, Bucket: "b", MaxRead: 1 << 20, CredentialsFile: "credentials/x"})
	f.Add(good)
	withCA, _ := EncodeFrame(&Request{Version: VersionCABundle, Bucket: "b", MaxRead: 1 << 20, CaBundle: testCAPEM(f)})
	f.Add(withCA)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 2, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, frame []byte) {
		var req Request
		if err := ReadFrame(bytes.NewReader(frame), &req); err != nil {
			return
		}
		if err := ValidateRequest(&req); err != nil {
			return
		}
		if req.Bucket == "" || req.MaxRead == 0 || len(frame) < 4 || binary.BigEndian.Uint32(frame) > MaxFrameSize {
			t.Fatalf("accepted an invalid request %v", &req)
		}
	})
}
