package audit

import (
	"strings"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/events"
)

func TestParsePod(t *testing.T) {
	for _, tc := range []struct {
		in, namespace string
		want          PodRef
		wantErr       bool
	}{
		{in: "shop/web-0", want: PodRef{Namespace: "shop", Name: "web-0"}},
		{in: "web-0", namespace: "shop", want: PodRef{Namespace: "shop", Name: "web-0"}},
		{in: "web-0", want: PodRef{Namespace: "default", Name: "web-0"}},
		{in: "0b5e7c2a-1111-4c1d-9a7e-5f3d2c1b0a01", want: PodRef{UID: "0b5e7c2a-1111-4c1d-9a7e-5f3d2c1b0a01"}},
		{in: "a/b/c", wantErr: true},
		{in: "Shop/web-0", wantErr: true},
		{in: "../x", wantErr: true},
	} {
		got, err := ParsePod(tc.in, tc.namespace)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParsePod(%q, %q) = %+v, %v; want %+v, error %v", tc.in, tc.namespace, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestTypesByShortAndFullName(t *testing.T) {
	for _, typ := range events.Types() {
		for _, name := range []string{string(typ), ShortType(typ)} {
			if got, err := ParseType(name); err != nil || got != typ {
				t.Errorf("ParseType(%q) = %q, %v; want %q", name, got, err, typ)
			}
		}
	}
	if _, err := ParseType("volume"); err == nil || !strings.Contains(err.Error(), "mount.failed") {
		t.Errorf("an unknown type: %v, want an error listing the types", err)
	}
}

func TestSelectionSubjects(t *testing.T) {
	for _, tc := range []struct {
		name string
		sel  Selection
		want []string
	}{
		{name: "nothing selected reads every subject, types outside the catalog too", want: nil},
		{name: "a node reads every type on its token", sel: Selection{Node: "a.b"}, want: []string{"s3csi.events.*.*.a_b"}},
		{name: "a node and a cluster-scoped type read nothing", sel: Selection{Node: "n", Types: []string{"volume.created"}}, want: []string{"-"}},
		{name: "types", sel: Selection{Types: []string{"volume.created", "mount.failed"}},
			want: []string{"s3csi.events.volume.created", "s3csi.events.mount.failed.*"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sel.Subjects(); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("Subjects() = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzView feeds arbitrary bytes, as they could be stored on the stream, through the whole
// view (decode, names, pod tracker, table): it must never panic, and no control character of
// the input may reach the output.
func FuzzView(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"io.s3csi.mount.failed.v1","datacontenttype":"application/json",` +
		`"data":{"node":"n","volumeId":"v","reason":"r\u001b[31m","message":"m\u0007","workloadPodUids":["0b5e7c2a-1111-4c1d-9a7e-5f3d2c1b0a01"]}}`))
	f.Add([]byte(`{"specversion":"1.0","id":"2","source":"/s","type":"io.s3csi.workload.scheduled.v1","datacontenttype":"application/json",` +
		`"data":{"node":"n","podNamespace":"d","podName":"p","podUid":"0b5e7c2a-1111-4c1d-9a7e-5f3d2c1b0a01"}}`))
	f.Add([]byte("\x1b]0;title\x07"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := events.StoredEvent{Seq: 1, Time: time.Unix(0, 0), Subject: "s3csi.events.mount.failed.n\x1b", Data: data}
		if d, err := events.Decode(data); err != nil {
			m.Err = err
		} else {
			m.Event = d
		}
		var out strings.Builder
		tr := NewPodTracker(PodRef{Namespace: "d", Name: "p"})
		v := &View{Pod: tr, Out: NewPrinter(&out, OutputTable, true)}
		if err := v.Take(m); err != nil {
			t.Fatal(err)
		}
		if err := v.Out.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, line := range tr.Diagnose(time.Unix(10, 0), "") {
			out.WriteString(line + "\n")
		}
		for _, r := range out.String() {
			if r != '\n' && (r < 0x20 || r == 0x7f) {
				t.Fatalf("control character %q in the output:\n%q", r, out.String())
			}
		}
	})
}
