package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func TestRoundTripOfEveryType(t *testing.T) {
	for _, typ := range events.Types() {
		t.Run(string(typ), func(t *testing.T) {
			p := payload(typ, "node-a.example.com")
			before := time.Now().UTC().Add(-time.Second)
			e := mustNew(t, p)
			b, err := events.Encode(e)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			d, err := events.Decode(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if d.Type != typ || d.Event.Type() != string(typ) || d.Event.ID() != e.ID() ||
				d.Event.Source() != testSource || d.Event.DataContentType() != "application/json" {
				t.Errorf("decoded envelope %v differs from %v", d.Event, e)
			}
			if !proto.Equal(d.Payload, p) {
				t.Errorf("decoded payload %v, want %v", d.Payload, p)
			}
			if d.Event.Time().Before(before) || d.Event.Time().Location() != time.UTC {
				t.Errorf("time %v is not now in UTC", d.Event.Time())
			}
			wantNode, wantSubject := "", d.Event.Subject()
			if typ.NodeScoped() {
				wantNode = "node-a.example.com"
				if wantSubject != wantNode {
					t.Errorf("CloudEvents subject %q, want the node", wantSubject)
				}
			}
			if d.Node() != wantNode {
				t.Errorf("Node() = %q, want %q", d.Node(), wantNode)
			}
		})
	}
}

func TestNewRefusesInvalidPayloads(t *testing.T) {
	tests := []struct {
		name    string
		payload proto.Message
		want    error
	}{
		{name: "a message outside the catalog", payload: &eventspb.VolumeRef{}, want: events.ErrUnknownType},
		{name: "a node-scoped payload without node",
			payload: payload(events.TypeAttachmentAssigned, ""), want: events.ErrInvalidEvent},
		{name: "a payload without a required identifier",
			payload: payloadWithout(payload(events.TypeAttachmentAssigned, "n"), "mountpointPodName"),
			want:    events.ErrInvalidEvent},
		{name: "a cleaned attachment that names neither attachment nor mountpoint pod",
			payload: &eventspb.AttachmentCleaned{Node: "n", Reason: "NodeGone"}, want: events.ErrInvalidEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := events.New(testSource, "", tt.payload); !errors.Is(err, tt.want) {
				t.Errorf("New error = %v, want %v", err, tt.want)
			}
		})
	}
}

// envelopeMap is a valid encoded attachment.assigned event as a map, for tests to corrupt.
func envelopeMap(t *testing.T) map[string]any {
	t.Helper()
	b, err := events.Encode(goldenEvent(t, events.TypeAttachmentAssigned))
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	return m
}

func TestDecodeRejectsInvalidEvents(t *testing.T) {
	valid, err := events.Encode(goldenEvent(t, events.TypeAttachmentAssigned))
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	tests := []struct {
		name   string
		raw    []byte                 // used when set
		mutate func(m map[string]any) // applied to a valid envelope otherwise
		reason string                 // a fragment of the error
	}{
		{name: "an event larger than MaxEventSize, even when valid JSON",
			raw: append(append([]byte{}, valid...), bytes.Repeat([]byte(" "), events.MaxEventSize)...), reason: "exceed"},
		{name: "bytes that are not JSON", raw: []byte(`{"specversion":"1.0",`), reason: "parse envelope"},
		{name: "a JSON array", raw: []byte(`[1,2]`), reason: "parse envelope"},
		{name: "specversion 0.3", mutate: func(m map[string]any) { m["specversion"] = "0.3" }, reason: "specversion"},
		{name: "no id", mutate: func(m map[string]any) { delete(m, "id") }, reason: "id"},
		{name: "no source", mutate: func(m map[string]any) { delete(m, "source") }, reason: "source"},
		{name: "an unknown type", mutate: func(m map[string]any) { m["type"] = "io.s3csi.nope.v1" }, reason: "unknown event type"},
		{name: "a content type other than application/json",
			mutate: func(m map[string]any) { m["datacontenttype"] = "text/plain"; m["data"] = "hello" }, reason: "datacontenttype"},
		{name: "data in base64", mutate: func(m map[string]any) {
			delete(m, "data")
			m["data_base64"] = "e30="
		}, reason: "datacontenttype"},
		{name: "no data", mutate: func(m map[string]any) { delete(m, "data") }, reason: "no data"},
		{name: "data that is a JSON string", mutate: func(m map[string]any) { m["data"] = `{"node":"n"}` }, reason: "parse"},
		{name: "data that does not match the schema",
			mutate: func(m map[string]any) { m["data"].(map[string]any)["pvName"] = []int{1} }, reason: "parse"},
		{name: "a payload missing a required field",
			mutate: func(m map[string]any) { delete(m["data"].(map[string]any), "attachmentName") }, reason: "attachment_name"},
		{name: "a payload whose node is not a node name",
			mutate: func(m map[string]any) { m["data"].(map[string]any)["node"] = "node-a.>" }, reason: "node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := tt.raw
			if raw == nil {
				m := envelopeMap(t)
				tt.mutate(m)
				var err error
				if raw, err = json.Marshal(m); err != nil {
					t.Fatalf("marshal: %v", err)
				}
			}
			d, err := events.Decode(raw)
			if !errors.Is(err, events.ErrInvalidEvent) {
				t.Fatalf("Decode = %v, %v; want ErrInvalidEvent", d, err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("error %q does not say %q", err, tt.reason)
			}
		})
	}
}

// rawEvent is the structured-mode JSON of an event of type typ with the given data, built by
// hand as a forger would, bypassing New's checks.
func rawEvent(t *testing.T, typ events.Type, data map[string]any) []byte {
	t.Helper()
	raw, err := json.Marshal(map[string]any{
		"specversion": "1.0", "id": "forged", "source": "/forger", "type": string(typ),
		"datacontenttype": "application/json", "data": data,
	})
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return raw
}

func TestDecodeRejectsNamesThatAreNotKubernetesNames(t *testing.T) {
	const node = "node-a"
	traversal := "../../../pods/" + uidWeb0 + "/volumes"
	tests := []struct {
		name   string
		typ    events.Type
		data   map[string]any
		reason string
	}{
		{"a needs-unmount event whose Mountpoint Pod name is a traversal", events.TypeMountpointNeedsUnmount,
			map[string]any{"node": node, "mountpointPodName": traversal}, "mountpoint_pod_name"},
		{"a needs-unmount event whose Mountpoint Pod name is mp- and a traversal", events.TypeMountpointNeedsUnmount,
			map[string]any{"node": node, "mountpointPodName": "mp-/../../../../../../../etc/passwd"}, "mountpoint_pod_name"},
		{"a needs-unmount event whose Mountpoint Pod UID is a traversal", events.TypeMountpointNeedsUnmount,
			map[string]any{"node": node, "mountpointPodName": mpName, "mountpointPodUid": "../" + uidMP}, "mountpoint_pod_uid"},
		{"a needs-unmount event whose PV name is a traversal", events.TypeMountpointNeedsUnmount,
			map[string]any{"node": node, "mountpointPodName": mpName, "pvName": "../pv"}, "pv_name"},
		{"an assigned event whose workload UID is not a UUID", events.TypeAttachmentAssigned,
			map[string]any{"node": node, "pvName": "pv-a", "workloadPodUid": "uid/..", "attachmentName": "s3pa-a", "mountpointPodName": mpName}, "workload_pod_uid"},
		{"an assigned event whose attachment name has a slash", events.TypeAttachmentAssigned,
			map[string]any{"node": node, "pvName": "pv-a", "workloadPodUid": uidWeb0, "attachmentName": "s3pa/a", "mountpointPodName": mpName}, "attachment_name"},
		{"an assigned event whose workload namespace is not a DNS label", events.TypeAttachmentAssigned,
			map[string]any{"node": node, "pvName": "pv-a", "workloadPodUid": uidWeb0, "attachmentName": "s3pa-a", "mountpointPodName": mpName, "workloadNamespace": "a.b"}, "workload_namespace"},
		{"a scheduled event whose pod name is a traversal", events.TypeWorkloadScheduled,
			map[string]any{"node": node, "podNamespace": "default", "podName": "..", "podUid": uidWeb0}, "pod_name"},
		{"a scheduled event whose volume's PV name is a traversal", events.TypeWorkloadScheduled,
			map[string]any{"node": node, "podNamespace": "default", "podName": "web-0", "podUid": uidWeb0,
				"volumes": []any{map[string]any{"pvName": "../../x", "volumeId": "v"}}}, "pv_name"},
		{"a mount-failed event with one bad workload UID in its list", events.TypeMountFailed,
			map[string]any{"node": node, "volumeId": "v", "reason": "r", "workloadPodUids": []string{uidWeb0, "../x"}}, "workload_pod_uids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := events.Decode(rawEvent(t, tt.typ, tt.data))
			if !errors.Is(err, events.ErrInvalidEvent) {
				t.Fatalf("Decode = %v, %v; want ErrInvalidEvent", d, err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("error %q does not name the field %s", err, tt.reason)
			}
		})
	}
}

func TestDecodeAcceptsRealNames(t *testing.T) {
	d, err := events.Decode(rawEvent(t, events.TypeMountpointNeedsUnmount, map[string]any{
		"node": "node-a", "mountpointPodName": mpName, "mountpointPodUid": uidMP, "pvName": "pvc-1",
	}))
	if err != nil {
		t.Fatalf("Decode of a well-formed needs-unmount event: %v", err)
	}
	if got := d.Payload.(*eventspb.MountpointNeedsUnmount).GetMountpointPodName(); got != mpName {
		t.Fatalf("Mountpoint Pod name %q, want %q", got, mpName)
	}
}

func TestDecodeIgnoresUnknownPayloadFields(t *testing.T) {
	m := envelopeMap(t)
	m["data"].(map[string]any)["fieldOfANewerProducer"] = "x"
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	d, err := events.Decode(raw)
	if err != nil {
		t.Fatalf("a newer producer's field poisoned the event: %v", err)
	}
	if got := d.Payload.(*eventspb.AttachmentAssigned).GetAttachmentName(); got != "s3pa-abc" {
		t.Errorf("attachment name %q, want s3pa-abc", got)
	}
}

func TestEncodeRefusesAnEventTooBigForConsumers(t *testing.T) {
	p := payload(events.TypeMountFailed, "n").(*eventspb.MountFailed)
	p.Message = strings.Repeat("x", events.MaxEventSize)
	e, err := events.New(testSource, "", p)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	if _, err := events.Encode(e); !errors.Is(err, events.ErrInvalidEvent) {
		t.Errorf("Encode error = %v, want ErrInvalidEvent", err)
	}
}

func TestDeterministicID(t *testing.T) {
	id := events.DeterministicID(events.TypeAttachmentAssigned, "uid-1", "42")
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(id) {
		t.Errorf("id %q is not hex sha256", id)
	}
	if again := events.DeterministicID(events.TypeAttachmentAssigned, "uid-1", "42"); again != id {
		t.Errorf("same fact, different ids: %q, %q", id, again)
	}
	distinct := map[string]string{
		"same fact":                    id,
		"another type":                 events.DeterministicID(events.TypeAttachmentCleaned, "uid-1", "42"),
		"another resourceVersion":      events.DeterministicID(events.TypeAttachmentAssigned, "uid-1", "43"),
		"parts split differently":      events.DeterministicID(events.TypeAttachmentAssigned, "uid-14", "2"),
		"parts joined":                 events.DeterministicID(events.TypeAttachmentAssigned, "uid-142"),
		"an empty part added":          events.DeterministicID(events.TypeAttachmentAssigned, "uid-1", "42", ""),
		"no parts":                     events.DeterministicID(events.TypeAttachmentAssigned),
		"one empty part":               events.DeterministicID(events.TypeAttachmentAssigned, ""),
		"a separator inside a part":    events.DeterministicID(events.TypeAttachmentAssigned, "uid-1\x0042"),
		"a length prefix inside parts": events.DeterministicID(events.TypeAttachmentAssigned, "uid-1", "2:42"),
	}
	seen := map[string]string{}
	for name, v := range distinct {
		if other, ok := seen[v]; ok {
			t.Errorf("%q and %q have the same id", name, other)
		}
		seen[v] = name
	}
}

// TestGoldenWireShapes pins the JSON of every type, so that a change of the wire shape is a
// reviewed diff of testdata/. Rewrite with: go test ./events/ -run TestGoldenWireShapes -update
func TestGoldenWireShapes(t *testing.T) {
	for _, typ := range events.Types() {
		t.Run(string(typ), func(t *testing.T) {
			b, err := events.Encode(goldenEvent(t, typ))
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			var got bytes.Buffer
			if err := json.Indent(&got, b, "", "  "); err != nil {
				t.Fatalf("indent: %v", err)
			}
			got.WriteByte('\n')
			path := filepath.Join("testdata", string(typ)+".json")
			if *update {
				if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
					t.Fatalf("write golden file: %v", err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (run with -update to create it): %v", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("%s differs from the encoding:\n%s", path, got.String())
			}
			if _, err := events.Decode(want); err != nil {
				t.Errorf("golden file does not decode: %v", err)
			}
		})
	}
}
