package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

const (
	// MaxEventSize bounds an encoded event. Decode checks it before parsing anything, so a
	// huge message costs a consumer nothing; Encode refuses to produce one.
	MaxEventSize = 64 << 10
	// ContentType is the datacontenttype of every event: the payload is protojson.
	ContentType = event.ApplicationJSON
	// specVersion is the only CloudEvents version accepted.
	specVersion = event.CloudEventsVersionV1
)

// Decoded is a validated event with its typed payload.
type Decoded struct {
	Event   event.Event
	Type    Type
	Payload proto.Message
}

// Node is the node a node-scoped event is about, "" for cluster-scoped events.
func (d *Decoded) Node() string {
	return payloadNode(d.Payload)
}

// Subject is the subject this event must travel on.
func (d *Decoded) Subject() (string, error) {
	return Subject(d.Type, d.Node())
}

// New builds the envelope of payload: type from the payload, the given source (a URI reference
// naming the producer, e.g. "/s3csi/pod-reconciler") and id (a random UUID when empty; use
// DeterministicID for facts that could be published twice), time now in UTC, and subject the
// node (node-scoped) or the volume id (volume.created/deleted), for readers of the audit trail.
func New(source, id string, payload proto.Message) (event.Event, error) {
	t, err := TypeOf(payload)
	if err != nil {
		return event.Event{}, fmt.Errorf("build event: %w", err)
	}
	data, err := marshalPayload(payload)
	if err != nil {
		return event.Event{}, fmt.Errorf("build event: %w", err)
	}
	if id == "" {
		id = uuid.NewString()
	}
	e := event.New(specVersion)
	e.SetID(id)
	e.SetSource(source)
	e.SetType(string(t))
	e.SetTime(time.Now().UTC())
	if s := ceSubject(payload); s != "" {
		e.SetSubject(s)
	}
	e.SetDataContentType(ContentType)
	e.DataEncoded = data
	if _, err := check(e); err != nil {
		return event.Event{}, fmt.Errorf("build event: %w", err)
	}
	return e, nil
}

// DeterministicID is the event id of a fact that could be published twice, e.g.
// DeterministicID(TypeAttachmentAssigned, s3paUID, resourceVersion).
//
// Problem: a producer that crashes after publishing, or retries after a lost PubAck, publishes
// the same fact again; with random ids JetStream stores it twice.
// Solution: derive the id from the fact (hex sha256 of the type and the parts, each
// length-prefixed so ("ab","c") and ("a","bc") differ); the id is the Nats-Msg-Id.
// Invariant: same type and parts, same id; inside the stream's duplicate window the second
// publish is dropped (PubAck.Duplicate), outside it consumers still tolerate it (hints only).
func DeterministicID(t Type, parts ...string) string {
	var b []byte
	for _, p := range append([]string{string(t)}, parts...) {
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Encode validates e as Decode would and returns its CloudEvents JSON (structured mode).
func Encode(e event.Event) ([]byte, error) {
	b, _, err := encode(e)
	return b, err
}

func encode(e event.Event) ([]byte, *Decoded, error) {
	d, err := check(e)
	if err != nil {
		return nil, nil, fmt.Errorf("encode event: %w", err)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, nil, fmt.Errorf("encode event: %w", err)
	}
	if len(b) > MaxEventSize {
		return nil, nil, fmt.Errorf("encode event: %w", invalid("%d bytes exceed the limit of %d", len(b), MaxEventSize))
	}
	return b, d, nil
}

// Decode parses and validates an event read off the bus. Every failure wraps ErrInvalidEvent:
// the bytes will never become valid, so the message must be terminated, not redelivered.
// Unknown payload fields are ignored, so a newer producer does not poison an older consumer.
func Decode(b []byte) (*Decoded, error) {
	if len(b) > MaxEventSize {
		return nil, fmt.Errorf("decode event: %w", invalid("%d bytes exceed the limit of %d", len(b), MaxEventSize))
	}
	var e event.Event
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("decode event: %w", invalid("parse envelope: %v", err))
	}
	d, err := check(e)
	if err != nil {
		return nil, fmt.Errorf("decode event: %w", err)
	}
	return d, nil
}

// check validates an envelope and parses its payload; errors wrap ErrInvalidEvent.
func check(e event.Event) (*Decoded, error) {
	if e.Context == nil || e.SpecVersion() != specVersion {
		return nil, invalid("specversion is not %s", specVersion)
	}
	if err := e.Validate(); err != nil {
		return nil, invalid("envelope: %v", err)
	}
	t := Type(e.Type())
	s, ok := specOf(t)
	if !ok {
		return nil, fmt.Errorf("%w: %w %q", ErrInvalidEvent, ErrUnknownType, t)
	}
	if e.DataContentType() != ContentType || e.DataBase64 {
		return nil, invalid("datacontenttype is %q, want %s data", e.DataContentType(), ContentType)
	}
	if len(e.DataEncoded) == 0 {
		return nil, invalid("no data")
	}
	payload := s.newPayload()
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(e.DataEncoded, payload); err != nil {
		return nil, invalid("parse %s payload: %v", t, err)
	}
	if err := checkPayload(s, payload); err != nil {
		return nil, invalid("%s payload: %v", t, err)
	}
	return &Decoded{Event: e, Type: t, Payload: payload}, nil
}

// checkPayload enforces the fields consumers need to find the objects an event is about.
func checkPayload(s spec, m proto.Message) error {
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	set := func(name string) bool {
		fd := fields.ByName(protoreflect.Name(name))
		return fd != nil && r.Has(fd)
	}
	if s.nodeScoped && !ValidNode(payloadNode(m)) {
		return fmt.Errorf("node %q is not a valid node name", payloadNode(m))
	}
	var missing []string
	for _, name := range s.required {
		if !set(name) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing required fields %v", missing)
	}
	if err := checkNames(r); err != nil {
		return err
	}
	if len(s.anyOf) == 0 {
		return nil
	}
	for _, name := range s.anyOf {
		if set(name) {
			return nil
		}
	}
	return fmt.Errorf("missing all of %v", s.anyOf)
}

// marshalPayload is protojson (lowerCamelCase names, unset fields omitted) compacted.
// protojson deliberately varies its whitespace between builds; compacting makes the bytes
// stable, which golden files and byte-level audits rely on.
func marshalPayload(m proto.Message) ([]byte, error) {
	raw, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal payload: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("compact payload: %w", err)
	}
	return buf.Bytes(), nil
}

func payloadNode(m proto.Message) string {
	if n, ok := m.(interface{ GetNode() string }); ok {
		return n.GetNode()
	}
	return ""
}

// ceSubject is the CloudEvents subject: the node, or the volume for cluster-scoped events.
func ceSubject(m proto.Message) string {
	if n := payloadNode(m); n != "" {
		return n
	}
	if v, ok := m.(interface{ GetVolumeId() string }); ok {
		return v.GetVolumeId()
	}
	return ""
}
