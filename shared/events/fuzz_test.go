package events_test

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/mppod"
)

// FuzzDecode feeds Decode what could arrive off the bus. Decode must never panic, and whatever
// it accepts must survive Encode and Decode again unchanged.
func FuzzDecode(f *testing.F) {
	golden, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(golden) == 0 {
		f.Fatalf("no golden files to seed from: %v", err)
	}
	for _, path := range golden {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"", "null", "{}", "[]", `"x"`, "\x00\xff", `{"specversion":"1.0"}`,
		`{"specversion":"1.0","id":"1","source":"/s","type":"io.s3csi.volume.created.v1","datacontenttype":"application/json","data":null}`,
		`{"specversion":"1.0","id":"1","source":"/s","type":"io.s3csi.volume.created.v1","datacontenttype":"application/json","data":{"volumeId":"v","bucketName":"b"},"ext":{"a":[1]}}`,
		`{"specversion":"1.0","id":"1","source":"/s","type":"io.s3csi.volume.created.v1","data_base64":"e30="}`,
		`{"specversion":"0.3","id":"1","source":"/s","type":"io.s3csi.volume.created.v1","datacontentencoding":"base64","data":"e30="}`,
		`{"specversion":"1.0","id":"1","source":"/s","type":"io.s3csi.mountpoint.needs-unmount.v1","datacontenttype":"application/json","data":{"node":"n","mountpointPodName":"../../../pods/x/volumes"}}`,
		`{"specversion":"1.0","id":"1","source":"/s","type":"io.s3csi.mountpoint.needs-unmount.v1","datacontenttype":"application/json","data":{"node":"n","mountpointPodName":"mp-/../../../../../../../../../../../../../etc/passwd"}}`,
		`{"specversion":"1.0","id":"1","source":"/s","type":"io.s3csi.workload.scheduled.v1","datacontenttype":"application/json","data":{"node":"n","podNamespace":"..","podName":"../x","podUid":"../../y","volumes":[{"pvName":"/etc"}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := events.Decode(b)
		if err != nil {
			return
		}
		again, err := events.Encode(d.Event)
		if err != nil {
			t.Fatalf("a decoded event does not encode: %v", err)
		}
		d2, err := events.Decode(again)
		if err != nil {
			t.Fatalf("a re-encoded event does not decode: %v\n%s", err, again)
		}
		if p, ok := d.Payload.(*eventspb.MountpointNeedsUnmount); ok {
			if _, err := mppod.SourceDir("/var/lib/kubelet", p.GetMountpointPodName()); err != nil {
				t.Fatalf("Decode accepted a Mountpoint Pod name SourceDir refuses: %v", err)
			}
		}
		if d2.Type != d.Type || d2.Event.ID() != d.Event.ID() || !proto.Equal(d2.Payload, d.Payload) {
			t.Fatalf("round trip changed the event:\n%v\n%v", d, d2)
		}
	})
}
