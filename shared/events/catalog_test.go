package events_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
)

func TestCatalog(t *testing.T) {
	types := events.Types()
	if len(types) != 9 {
		t.Fatalf("catalog has %d types, want 9", len(types))
	}
	stems := map[string]events.Type{}
	for _, typ := range types {
		if !strings.HasPrefix(typ.Stem(), events.SubjectPrefix+".") {
			t.Errorf("%s: stem %q is outside %s", typ, typ.Stem(), events.SubjectPrefix)
		}
		if other, ok := stems[typ.Stem()]; ok {
			t.Errorf("%s and %s share the stem %q", typ, other, typ.Stem())
		}
		stems[typ.Stem()] = typ
		got, err := events.TypeOf(typ.NewPayload())
		if err != nil || got != typ {
			t.Errorf("TypeOf(%s payload) = %q, %v", typ, got, err)
		}
		wantNodeScoped := typ != events.TypeVolumeCreated && typ != events.TypeVolumeDeleted
		if typ.NodeScoped() != wantNodeScoped {
			t.Errorf("%s: NodeScoped() = %v, want %v", typ, typ.NodeScoped(), wantNodeScoped)
		}
	}
	if got := events.TypeAttachmentAssigned.Stem(); got != "s3csi.events.attachment.assigned" {
		t.Errorf("attachment.assigned stem = %q", got)
	}
	if _, err := events.TypeOf(&eventspb.VolumeRef{}); !errors.Is(err, events.ErrUnknownType) {
		t.Errorf("TypeOf(VolumeRef) error = %v, want ErrUnknownType", err)
	}
	if events.Type("io.s3csi.nope.v1").Known() {
		t.Error("an unknown type is Known")
	}
}

func TestSubject(t *testing.T) {
	tests := []struct {
		name    string
		typ     events.Type
		node    string
		want    string
		wantErr bool
	}{
		{name: "a node-scoped event goes to its node's subject", typ: events.TypeAttachmentAssigned,
			node: "node-a", want: "s3csi.events.attachment.assigned.node-a"},
		{name: "dots of a node name become underscores so the node stays one token",
			typ: events.TypeMountpointNeedsUnmount, node: "ip-10-0-0-1.eu-west-1.compute.internal",
			want: "s3csi.events.mountpoint.needs-unmount.ip-10-0-0-1_eu-west-1_compute_internal"},
		{name: "a cluster-scoped event has no node token", typ: events.TypeVolumeCreated,
			want: "s3csi.events.volume.created"},
		{name: "a node-scoped event needs a node", typ: events.TypeVolumePublished, wantErr: true},
		{name: "a cluster-scoped event refuses a node", typ: events.TypeVolumeDeleted, node: "node-a", wantErr: true},
		{name: "a node name with subject wildcards is refused", typ: events.TypeMountFailed, node: "a.*", wantErr: true},
		{name: "a node name with an underscore is refused", typ: events.TypeMountFailed, node: "a_b", wantErr: true},
		{name: "an unknown type is refused", typ: "io.s3csi.nope.v1", node: "node-a", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.Subject(tt.typ, tt.node)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Subject(%q, %q) = %q, %v; want %q, error %v", tt.typ, tt.node, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestNodeToken(t *testing.T) {
	// Injective on node names: distinct names never share a token.
	names := []string{"a.b", "a-b", "ab", "a.b.c", "a-b.c", "a.b-c"}
	seen := map[string]string{}
	for _, n := range names {
		tok := events.NodeToken(n)
		if strings.ContainsAny(tok, ".*> ") {
			t.Errorf("NodeToken(%q) = %q is not one subject token", n, tok)
		}
		if other, ok := seen[tok]; ok {
			t.Errorf("NodeToken(%q) = NodeToken(%q) = %q", n, other, tok)
		}
		seen[tok] = n
	}
}

func TestNodeSubjects(t *testing.T) {
	tests := []struct {
		name  string
		node  string
		types []events.Type
		want  []string
	}{
		{name: "a node's consumer filters each type on its own token", node: "node-a.example",
			types: []events.Type{events.TypeAttachmentAssigned, events.TypeMountpointNeedsUnmount},
			want: []string{"s3csi.events.attachment.assigned.node-a_example",
				"s3csi.events.mountpoint.needs-unmount.node-a_example"}},
		{name: "no node means every node", types: []events.Type{events.TypeMountFailed},
			want: []string{"s3csi.events.mount.failed.*"}},
		{name: "cluster-scoped types are not filtered by node", node: "node-a",
			types: []events.Type{events.TypeVolumeCreated}, want: []string{"s3csi.events.volume.created"}},
		{name: "a repeated type is listed once", node: "n",
			types: []events.Type{events.TypeMountFailed, events.TypeMountFailed},
			want:  []string{"s3csi.events.mount.failed.n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := events.NodeSubjects(tt.node, tt.types...); !slices.Equal(got, tt.want) {
				t.Errorf("NodeSubjects = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("no types means every type", func(t *testing.T) {
		if got := events.NodeSubjects("n"); len(got) != len(events.Types()) {
			t.Errorf("NodeSubjects(n) has %d subjects, want %d", len(got), len(events.Types()))
		}
	})
}

// payloadWithout returns a copy of p with the named field cleared.
func payloadWithout(p proto.Message, field string) proto.Message {
	c := proto.Clone(p)
	r := c.ProtoReflect()
	r.Clear(r.Descriptor().Fields().ByJSONName(field))
	return c
}
