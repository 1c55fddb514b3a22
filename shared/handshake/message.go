// Package handshake is the protocol between the node-agent and the mounter of a Mountpoint Pod.
//
// The node-agent opens /dev/fuse, mounts it on the source dir, then connects to
// <comm>/mount.sock and sends one Request with the /dev/fuse file and a state file attached
// (SCM_RIGHTS). The mounter starts the filesystem on that file and answers one Response on the
// same connection: success once the filesystem serves, or the error text; it keeps the
// connection open while it serves. The node-agent keeps both files (Keep) and sends the request
// again, with Resume, to the mounter that replaces one that died. The messages are defined in
// proto/s3csi/mount/v1/handshake.proto; each frame is a 4-byte big-endian length and the
// message's protobuf encoding, which carries a version, so either side can refuse what it does
// not understand. Requests never carry secrets: credentials travel as AWS profile files in the
// comm dir, named by paths relative to it.
package handshake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/handshakepb"
)

// Version is the protocol version this package speaks.
const Version = 1

// MaxFrameSize bounds one frame, so a peer cannot make the other allocate without limit.
const MaxFrameSize = 64 << 10

// Request asks the mounter to serve a filesystem on the attached /dev/fuse file.
type Request = handshakepb.MountRequest

// Response is the mounter's answer.
type Response = handshakepb.MountResponse

// ValidateRequest checks a decoded request.
func ValidateRequest(r *Request) error {
	var errs []error
	if r.Version != Version {
		errs = append(errs, fmt.Errorf("protocol version %d, want %d", r.Version, Version))
	}
	if r.Bucket == "" {
		errs = append(errs, errors.New("no bucket"))
	}
	if r.MaxRead == 0 {
		errs = append(errs, errors.New("no max read"))
	}
	for _, f := range []string{r.ConfigFile, r.CredentialsFile} {
		if f != "" && (strings.HasPrefix(f, "/") || strings.Contains(f, "..")) {
			errs = append(errs, fmt.Errorf("file %q is not relative to the comm dir", f))
		}
	}
	for _, kv := range r.Env {
		if !strings.Contains(kv, "=") {
			errs = append(errs, fmt.Errorf("environment entry %q is not KEY=VALUE", kv))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("validate mount request: %w", err)
	}
	return nil
}

// EncodeFrame returns v as one frame.
func EncodeFrame(v proto.Message) ([]byte, error) {
	body, err := proto.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode frame: %w", err)
	}
	if len(body) > MaxFrameSize {
		return nil, fmt.Errorf("encode frame: %d bytes exceed %d", len(body), MaxFrameSize)
	}
	frame := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body))) //nolint:gosec // bounded by MaxFrameSize
	return append(frame, body...), nil
}

// DecodeBody reads one frame's body from r (the length prefix already read as n) into v.
func DecodeBody(r io.Reader, n uint32, v proto.Message) error {
	if n > MaxFrameSize {
		return fmt.Errorf("decode frame: %d bytes exceed %d", n, MaxFrameSize)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return fmt.Errorf("read frame body: %w", err)
	}
	if err := proto.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return nil
}

// ReadFrame reads one whole frame from r into v.
func ReadFrame(r io.Reader, v proto.Message) error {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return fmt.Errorf("read frame length: %w", err)
	}
	return DecodeBody(r, binary.BigEndian.Uint32(head[:]), v)
}
