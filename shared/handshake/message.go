// Package handshake is the protocol between the node-agent and the mounter of a Mountpoint Pod.
//
// The node-agent opens /dev/fuse, mounts it on the source dir, then connects to
// <comm>/mount.sock and sends one Request with the /dev/fuse file and a state file attached
// (SCM_RIGHTS). The mounter starts the filesystem on that file and answers one Response on the
// same connection: success once the filesystem serves, or the error text; it keeps the
// connection open while it serves. The messages are defined in
// proto/s3csi/mount/v1/handshake.proto; each frame is a 4-byte big-endian length and the
// message's protobuf encoding, which carries a version, so either side can refuse what it does
// not understand (Version, RequestVersion). Requests never carry secrets: credentials travel as
// AWS profile files in the comm dir, named by paths relative to it; the CA bundle a request may
// carry (the driver's s3.caBundle) is public.
//
// # The hand-over
//
// The node-agent keeps a copy of both files for as long as the source is mounted (Kept), so that
// a mounter that ends does not end its workloads' mount. One word per act, in code and docs:
// keep (hold the copies), end (the serving mounter's handshake connection closes: it died, or
// it handed the mount over because its pod is going), resume (send the kept files and the same
// request, with Resume, to the next mounter, which replays what the kernel holds), reattach (a
// node-agent that restarted asks the serving mounter for the files again) and close (let the
// copies go: the connection ends with them). The states of a Kept connection:
//
//	state             | event                                          | next state
//	------------------+------------------------------------------------+------------------
//	(none)            | Keep: the first mounter answers success        | serving
//	(none)            | Reattach: the answer names the recorded request| serving
//	serving           | the mounter ends, the source still mounted     | waiting
//	serving           | the mounter ends, the source unmounted         | closed
//	waiting           | a next mounter received the files (ResumeWait) | replaying
//	waiting           | its Mountpoint Pod goes first                  | waiting (next pod)
//	waiting           | ResumeWait passes, or the source is unmounted  | closed
//	replaying         | the mounter answers success (ReplayWait)       | serving (resumed)
//	replaying         | it refuses, or does not answer in ReplayWait   | closed
//	any               | Close                                          | closed
//
// The mounter side (services/mounter) serves, ends with or without a hand-over, and answers a
// reattach only to the uid that sent its request; the node-agent sends only what it recorded
// sending (Reattach refuses an answer naming any other request), and trusts neither the
// descriptors, the state file's size nor the error text a mounter gives back.
package handshake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/cabundle"
	"github.com/s3csi/s3csi/shared/handshakepb"
)

// Protocol versions. A request is sent with the lowest version that carries what it holds
// (RequestVersion), so that a mounter built before a field existed refuses a request that needs
// it instead of ignoring the field, while every other request still reaches it; a receiver
// accepts every version from Version to MaxVersion. Responses and reattach requests carry
// Version.
const (
	// Version is the first version: every field but ca_bundle.
	Version = 1
	// VersionCABundle adds ca_bundle, the CAs the mounter's S3 client trusts.
	VersionCABundle = 2
	// MaxVersion is the newest version this package speaks.
	MaxVersion = VersionCABundle
)

// RequestVersion is the version r is sent with: the lowest that carries every field r sets.
func RequestVersion(r *Request) uint32 {
	if len(r.GetCaBundle()) > 0 {
		return VersionCABundle
	}
	return Version
}

// CheckVersion refuses a version this package does not speak.
func CheckVersion(v uint32) error {
	if v < Version || v > MaxVersion {
		return fmt.Errorf("protocol version %d, this side speaks %d to %d", v, Version, MaxVersion)
	}
	return nil
}

// MaxFrameSize bounds one frame, so a peer cannot make the other allocate without limit.
const MaxFrameSize = 64 << 10

// Request asks the mounter to serve a filesystem on the attached /dev/fuse file.
type Request = handshakepb.MountRequest

// Response is the mounter's answer.
type Response = handshakepb.MountResponse

// ValidateRequest checks a decoded request.
func ValidateRequest(r *Request) error {
	var errs []error
	if err := CheckVersion(r.Version); err != nil {
		errs = append(errs, err)
	}
	if len(r.CaBundle) > 0 {
		if r.Version < VersionCABundle {
			errs = append(errs, fmt.Errorf("a CA bundle in a version %d request, which cannot carry one", r.Version))
		}
		if _, err := cabundle.Parse(r.CaBundle); err != nil {
			errs = append(errs, err)
		}
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
