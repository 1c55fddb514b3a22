package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

var replaySeed = flag.Uint64("replay-seed", 0, "seed of TestReplayedEventsWithChaosChangeNothing (0: a new one, printed)")

// TestReplayedEventsWithChaosChangeNothing records the event stream of a real scenario (the
// pod-reconciler and janitor binaries: workloads scheduled and attached, one volume's workload
// deleted and cleaned up), then replays it to fresh services of both kinds on a fresh NATS, with
// the events shuffled, a fifth dropped, some published twice (under the same message id and
// under another), and forged events mixed in: a needs-unmount, a volume.unpublished and a
// mount.failed about the live Mountpoint Pod and its workloads, events for an unknown node and
// volume, and malformed messages. The API objects must end exactly as the scenario left them,
// and the fresh services must act on nothing: no event of theirs, no write.
//
// The chaos is drawn from a seed, printed; -replay-seed=N replays a failing draw.
func TestReplayedEventsWithChaosChangeNothing(t *testing.T) {
	seed := *replaySeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d (go test -run %s -args -replay-seed=%d draws it again)", seed, t.Name(), seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))

	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	reconcilerBin := buildService(t, root, "pod-reconciler", "s3csi-pod-reconciler")
	janitorBin := buildService(t, root, "janitor", "s3csi-janitor")
	api := testenv.StartAPIServer(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c, err := client.New(api.Config, client.Options{Scheme: api.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	services := func(natsURL string) (stop func()) {
		common := []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--nats-url=" + natsURL, "--admin-address=127.0.0.1:0"}
		r := testenv.StartProcess(t, reconcilerBin, append(common, "--mountpoint-image=s3csi-mounter:test", "--resync-period=10s")...)
		j := testenv.StartProcess(t, janitorBin, append(common, "--sweep-interval=1s", "--stale-after=10s", "--unmount-grace=5s")...)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("pod-reconciler output:\n%s\njanitor output:\n%s", r.Output(), j.Output())
			}
		})
		testenv.WaitHealthy(t, "http://"+r.AdminAddress(t)+"/healthz")
		testenv.WaitHealthy(t, "http://"+j.AdminAddress(t)+"/healthz")
		return func() {
			r.StopsCleanlyOnSIGTERM(t, 10*time.Second)
			j.StopsCleanlyOnSIGTERM(t, 10*time.Second)
		}
	}

	// The scenario, recorded.
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mppod.DefaultNamespace}},
		fixture.Node("node-a"),
		fixture.PV("pv-kept", fixture.PreBoundTo(fixture.DefaultNamespace, "kept")),
		fixture.PVC("kept", fixture.WithVolumeName("pv-kept")),
		fixture.PV("pv-gone", fixture.PreBoundTo(fixture.DefaultNamespace, "gone")),
		fixture.PVC("gone", fixture.WithVolumeName("pv-gone")),
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	first := testenv.StartNATS(t)
	stopFirst := services(first.URL())
	live := map[string]*corev1.Pod{}
	for name, claim := range map[string]string{"app-1": "kept", "app-2": "kept", "leaver": "gone"} {
		pod := fixture.Pod(name, fixture.WithClaim("data", claim))
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if err := c.SubResource("binding").Create(ctx, pod, fixture.Binding(pod, "node-a")); err != nil {
			t.Fatalf("bind %s: %v", name, err)
		}
		live[name] = pod
	}
	eventually(ctx, t, "both volumes are attached", func() bool {
		list := &s3csiv2.MountpointS3PodAttachmentList{}
		return c.List(ctx, list) == nil && len(list.Items) == 2
	})
	leaver := live["leaver"]
	delete(live, "leaver")
	if err := c.Delete(ctx, leaver, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	goneMP := mppod.Name(string(leaver.UID), "pv-gone")
	eventually(ctx, t, "the leaver's attachment is deleted and its Mountpoint Pod asked to unmount", func() bool {
		list := &s3csiv2.MountpointS3PodAttachmentList{}
		mp := &corev1.Pod{}
		if c.List(ctx, list) != nil || len(list.Items) != 1 ||
			c.Get(ctx, client.ObjectKey{Namespace: mppod.DefaultNamespace, Name: goneMP}, mp) != nil {
			return false
		}
		return mp.Annotations[mppod.AnnotationNeedsUnmount] != ""
	})
	mp := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: mppod.DefaultNamespace, Name: goneMP}, mp); err != nil {
		t.Fatal(err)
	}
	mp.Status.Phase = corev1.PodSucceeded // what its kubelet would write once the mounter exits 0
	if err := c.Status().Update(ctx, mp); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "the finished Mountpoint Pod is deleted", func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(mp), &corev1.Pod{}) != nil
	})
	time.Sleep(3 * time.Second) // a few janitor sweeps on the settled state
	stopFirst()
	want := canonicalState(ctx, t, c)
	recorded := readAll(ctx, t, first.URL())
	t.Logf("recorded %d events; the scenario left %d objects", len(recorded), len(want))
	if len(recorded) < 5 {
		t.Fatalf("recorded only %d events: the scenario published too little to replay", len(recorded))
	}

	// The chaos: the recorded events shuffled, some dropped, some doubled, forgeries mixed in.
	var keptMP string
	list := &s3csiv2.MountpointS3PodAttachmentList{}
	if err := c.List(ctx, list); err != nil || len(list.Items) != 1 {
		t.Fatalf("list attachments: %d, %v", len(list.Items), err)
	}
	for name := range list.Items[0].Spec.MountpointS3PodAttachments {
		keptMP = name
	}
	keptPod := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: mppod.DefaultNamespace, Name: keptMP}, keptPod); err != nil {
		t.Fatal(err)
	}
	msgs := chaos(t, rng, recorded, forgeries(t, keptPod, live))

	second := testenv.StartNATS(t)
	stopSecond := services(second.URL())
	nc, err := events.Connect(ctx, second.URL(), t.Name(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("replay %s: %v", m.Subject, err)
		}
	}
	replayed := time.Now()
	eventually(ctx, t, "the fresh janitor has settled every replayed message", func() bool {
		cons, err := js.Consumer(ctx, events.StreamName, events.JanitorDurable)
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream > 0
	})
	time.Sleep(3 * time.Second) // a few more sweeps, and room for a late wrong action
	t.Logf("%d messages replayed; the janitor settled them in %s", len(msgs), time.Since(replayed).Round(time.Millisecond))
	stopSecond()

	got := canonicalState(ctx, t, c)
	if !maps.Equal(got, want) {
		t.Errorf("seed %d: the API objects differ after the replay:\n%s", seed, stateDiff(want, got))
	}
	var acted []string
	for _, m := range readAll(ctx, t, second.URL()) {
		if m.Event != nil && !strings.HasPrefix(m.Event.Event.Source(), replaySource) && !slices.ContainsFunc(recorded, func(r events.StoredEvent) bool {
			return r.Event != nil && r.Event.Event.ID() == m.Event.Event.ID()
		}) {
			acted = append(acted, string(m.Event.Type)+" from "+m.Event.Event.Source())
		}
	}
	if len(acted) > 0 {
		t.Errorf("seed %d: the fresh services acted on the replay and published %v", seed, acted)
	}
}

// replaySource is the CloudEvents source of the forged events.
const replaySource = "/s3csi/replay-test"

// forgeries are valid events that claim what is false: the live Mountpoint Pod must unmount, its
// workloads unpublished, its mount failed; and events about a node and volume that do not exist.
func forgeries(t *testing.T, mp *corev1.Pod, live map[string]*corev1.Pod) []*nats.Msg {
	t.Helper()
	var uids []string
	for _, p := range live {
		uids = append(uids, string(p.UID))
	}
	slices.Sort(uids)
	pv := mp.Annotations["s3.csi.scality.com/volume-name"]
	payloads := []proto.Message{
		&eventspb.MountpointNeedsUnmount{Node: "node-a", MountpointPodName: mp.Name, MountpointPodUid: string(mp.UID), PvName: pv, Reason: "NoWorkload"},
		&eventspb.MountFailed{Node: "node-a", VolumeId: "pv-kept", PvName: pv, MountpointPodName: mp.Name, WorkloadPodUids: uids,
			Reason: "MounterExited", Message: "forged"},
		&eventspb.MountpointNeedsUnmount{Node: "node-z", MountpointPodName: mp.Name, MountpointPodUid: string(mp.UID), PvName: pv, Reason: "NoWorkload"},
	}
	for _, uid := range uids {
		payloads = append(payloads, &eventspb.VolumeUnpublished{Node: "node-a", VolumeId: "pv-kept", WorkloadPodUid: uid,
			TargetPath: "/var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~csi/" + pv + "/mount"})
	}
	var msgs []*nats.Msg
	for _, p := range payloads {
		e, err := events.New(replaySource, "", p)
		if err != nil {
			t.Fatalf("forge %T: %v", p, err)
		}
		data, err := events.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		d, err := events.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		subject, err := d.Subject()
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, message(subject, e.ID(), data))
	}
	// Malformed: not JSON, an event on another node's subject, a payload of the wrong type.
	valid := msgs[0]
	msgs = append(msgs,
		message(events.SubjectPrefix+".volume.unpublished.node-a", "junk-1", []byte("{not json")),
		message(strings.Replace(valid.Subject, ".node-a", ".node-b", 1), "misrouted", valid.Data),
		message(events.SubjectPrefix+".mount.failed.node-a", "wrong-type", valid.Data),
	)
	return msgs
}

// chaos returns the recorded events shuffled, about a fifth dropped, about a fifth published a
// second time under the same message id (the stream drops it) and a fifth under another (the
// consumers get it twice), with the forgeries at random places.
func chaos(t *testing.T, rng *rand.Rand, recorded []events.StoredEvent, forged []*nats.Msg) []*nats.Msg {
	t.Helper()
	var msgs []*nats.Msg
	dropped, doubled := 0, 0
	for _, r := range recorded {
		if r.Event == nil {
			t.Fatalf("the scenario stored an invalid message at %d: %v", r.Seq, r.Err)
		}
		id := r.Event.Event.ID()
		switch x := rng.IntN(5); x {
		case 0:
			dropped++
			continue
		case 1:
			msgs = append(msgs, message(r.Subject, id, r.Data))
		case 2:
			msgs = append(msgs, message(r.Subject, id+"-again", r.Data))
			doubled++
		}
		msgs = append(msgs, message(r.Subject, id, r.Data))
	}
	msgs = append(msgs, forged...)
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	t.Logf("chaos: %d recorded events, %d dropped, %d delivered twice, %d forged or malformed, %d messages",
		len(recorded), dropped, doubled, len(forged), len(msgs))
	return msgs
}

func message(subject, id string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set("Content-Type", events.MessageContentType)
	return m
}

// readAll reads every message of the events stream of the NATS at url.
func readAll(ctx context.Context, t *testing.T, url string) []events.StoredEvent {
	t.Helper()
	nc, err := events.Connect(ctx, url, t.Name()+"-reader", logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var all []events.StoredEvent
	if err := events.ReadStream(ctx, js, events.ReadOptions{}, func(m events.StoredEvent) error {
		all = append(all, m)
		return nil
	}); err != nil {
		t.Fatalf("read the event stream: %v", err)
	}
	return all
}

// canonicalState is every attachment (name and spec) and Mountpoint Pod (name, UID, phase and
// s3csi's annotations) as JSON by kind and name, for a diff that ignores resourceVersions and
// timestamps.
func canonicalState(ctx context.Context, t *testing.T, c client.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	atts := &s3csiv2.MountpointS3PodAttachmentList{}
	if err := c.List(ctx, atts); err != nil {
		t.Fatal(err)
	}
	for _, a := range atts.Items {
		b, _ := json.Marshal(a.Spec)
		out["attachment/"+a.Name] = string(b)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(mppod.DefaultNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		ann := map[string]string{}
		for k, v := range p.Annotations {
			if strings.HasPrefix(k, "s3.csi.scality.com/") {
				ann[k] = v
			}
		}
		b, _ := json.Marshal(map[string]any{"uid": p.UID, "phase": p.Status.Phase, "annotations": ann})
		out["mountpointpod/"+p.Name] = string(b)
	}
	return out
}

func stateDiff(want, got map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			fmt.Fprintf(&b, "- %s %s\n", k, want[k])
		} else if g != want[k] {
			fmt.Fprintf(&b, "~ %s\n    was %s\n    now %s\n", k, want[k], g)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "+ %s %s\n", k, got[k])
		}
	}
	return b.String()
}
