package cleanup_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/events/eventspb"
	"github.com/s3csi/s3csi/shared/keymutex"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/node-agent/internal/cleanup"
	"github.com/s3csi/s3csi/services/node-agent/internal/notify"
	"github.com/s3csi/s3csi/services/node-agent/internal/source"
)

// gonePods is a PodReader for which every Mountpoint Pod is gone: the case in which a cleanup
// removes a source dir without asking anything else.
type gonePods struct{}

func (gonePods) Get(context.Context, string) (*corev1.Pod, error) { return nil, nil }

// syncTrigger cleans at once, inside the event handler, so a settled event has had its whole
// effect; the Cleaner's own trigger queue does the same Clean later.
type syncTrigger struct {
	ctx     context.Context
	cleaner *cleanup.Cleaner
	log     logr.Logger
}

func (s syncTrigger) Trigger(name string) {
	if _, err := s.cleaner.Clean(s.ctx, name); err != nil {
		s.log.Error(err, "Cleaning a source failed", "mountpointPod", name)
	}
}

// lines collects log lines; safe for the consumer's goroutines.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, prefix+" "+args)
}

func (l *lines) contain(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.all {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// TestAForgedNeedsUnmountEventCannotReachOutsideTheSourcesDir publishes, on this node's
// subject of a real JetStream, a needs-unmount event whose Mountpoint Pod name climbs out of
// the driver's mnt dir into a workload pod's volume dir, then a genuine one.
func TestAForgedNeedsUnmountEventCannotReachOutsideTheSourcesDir(t *testing.T) {
	const node = "node-a"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kubelet := testenv.StartKubeletDir(t)
	victimRel := filepath.Join("pods", "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11", "volumes", "kubernetes.io~csi", "pv-victim", "mount")
	victim := filepath.Join(kubelet.Root, victimRel)
	if err := os.MkdirAll(victim, 0o750); err != nil {
		t.Fatal(err)
	}
	forgedName := "../../../" + victimRel
	if got := filepath.Clean(kubelet.SourceDir(forgedName)); got != victim {
		t.Fatalf("the forged name joins to %s, want it to reach %s", got, victim)
	}
	genuine := mppod.Name("3f0c6a2e-58b1-4d2f-9a4e-0c1b2d3e4f50", "pv-a")
	if err := os.Mkdir(kubelet.SourceDir(genuine), 0o750); err != nil {
		t.Fatal(err)
	}

	srv := testenv.StartNATS(t)
	nc, err := events.Connect(ctx, srv.URL(), "test", logr.Discard())
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
	logs := &lines{}
	log := funcr.New(logs.add, funcr.Options{Verbosity: 4})
	cleaner := cleanup.New(kubelet.Root, gonePods{}, &keymutex.Mutex{}, time.Hour, nil)
	h := &notify.Handler{Node: node, Unmount: syncTrigger{ctx: logr.NewContext(ctx, log), cleaner: cleaner, log: log}}
	consumer, err := events.NewConsumer(js, notify.ConsumerConfig(node), h.Handle, log)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- consumer.Start(rctx) }()
	defer func() {
		stop()
		if err := <-errc; err != nil {
			t.Errorf("consumer: %v", err)
		}
	}()
	// The consumer is created by Start: wait for it before publishing (DeliverNew).
	testenv.Eventually(t, 10*time.Second, "the node's consumer", func() bool {
		_, err := js.Consumer(ctx, events.StreamName, notify.ConsumerConfig(node).Durable)
		return err == nil
	})

	subject, err := events.Subject(events.TypeMountpointNeedsUnmount, node)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := json.Marshal(map[string]any{
		"specversion": "1.0", "id": "forged-1", "source": "/forger", "type": string(events.TypeMountpointNeedsUnmount),
		"datacontenttype": "application/json", "data": map[string]any{"node": node, "mountpointPodName": forgedName},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, subject, forged); err != nil {
		t.Fatal(err)
	}
	ev, err := events.New("/test/pod-reconciler", "", &eventspb.MountpointNeedsUnmount{Node: node, MountpointPodName: genuine})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.NewPublisher(js, events.PublisherOptions{}).Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}

	// Events are handled in order, each before it is settled: once both are, both had their
	// effect.
	testenv.Eventually(t, 15*time.Second, "both events settled, none redelivered", func() bool {
		c, err := js.Consumer(ctx, events.StreamName, notify.ConsumerConfig(node).Durable)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumRedelivered == 0 && info.AckFloor.Stream == 2
	})
	if _, err := os.Stat(kubelet.SourceDir(genuine)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the genuine event's source dir remains: %v", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the directory the forged event named is gone: %v", err)
	}
	if !logs.contain("terminating invalid event") || !logs.contain("mountpoint_pod_name") {
		t.Errorf("no log line says the forged event was terminated for its Mountpoint Pod name:\n%s", strings.Join(logs.all, "\n"))
	}
}

func TestCleanRefusesNamesThatAreNotMountpointPodNames(t *testing.T) {
	kubelet := testenv.StartKubeletDir(t)
	victim := filepath.Join(kubelet.Root, "pods", "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11", "volumes")
	if err := os.MkdirAll(victim, 0o750); err != nil {
		t.Fatal(err)
	}
	cleaner := cleanup.New(kubelet.Root, gonePods{}, &keymutex.Mutex{}, time.Hour, nil)
	tests := []struct{ name, mountpointPod string }{
		{"a traversal to a workload pod's volumes", "../../../pods/0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11/volumes"},
		{"a name that starts like a Mountpoint Pod's and climbs out", "mp-/../../../pods/0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11/volumes"},
		{"the mnt dir itself", "."},
		{"an empty name", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cleaner.Clean(context.Background(), tt.mountpointPod)
			if !errors.Is(err, mppod.ErrInvalidName) || got != cleanup.OutcomeFailed {
				t.Fatalf("Clean(%q) = %q, %v; want failed with ErrInvalidName", tt.mountpointPod, got, err)
			}
			if _, err := os.Stat(victim); err != nil {
				t.Fatalf("Clean(%q) touched %s: %v", tt.mountpointPod, victim, err)
			}
			if _, err := os.Stat(mppod.SourcesDir(kubelet.Root)); err != nil {
				t.Fatalf("Clean(%q) touched the mnt dir: %v", tt.mountpointPod, err)
			}
		})
	}
}

func TestCommDirStaysUnderThePodsDir(t *testing.T) {
	tests := []struct {
		name, uid string
		ok        bool
	}{
		{"a UUID names the pod's comm emptyDir", "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11", true},
		{"a traversal is refused", "../../etc", false},
		{"a UUID followed by a traversal is refused", "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11/../..", false},
		{"an empty UID is refused", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := source.CommDir("/var/lib/kubelet", tt.uid)
			if !tt.ok {
				if err == nil {
					t.Fatalf("CommDir(%q) = %q, want an error", tt.uid, got)
				}
				return
			}
			want := "/var/lib/kubelet/pods/" + tt.uid + "/volumes/kubernetes.io~empty-dir/comm"
			if err != nil || got != want {
				t.Fatalf("CommDir(%q) = %q, %v; want %q", tt.uid, got, err, want)
			}
		})
	}
}

// unmountPod is a PodReader whose every Mountpoint Pod is marked needs-unmount.
type unmountPod struct{ uid string }

func (p unmountPod) Get(_ context.Context, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	pod.Name, pod.UID = name, types.UID(p.uid)
	pod.Annotations = map[string]string{mppod.AnnotationNeedsUnmount: "true"}
	return pod, nil
}

func TestCleanDoesNotFollowASymlinkAtMountExit(t *testing.T) {
	kubelet := testenv.StartKubeletDir(t)
	uid := "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11"
	commDir, err := source.CommDir(kubelet.Root, uid)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(commDir, 0o750); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(commDir, mppod.MountExitName)); err != nil {
		t.Fatal(err)
	}
	cleaner := cleanup.New(kubelet.Root, unmountPod{uid: uid}, &keymutex.Mutex{}, time.Hour, nil)
	if _, err := cleaner.Clean(context.Background(), mppod.Name(uid, "pv")); err != nil {
		t.Fatalf("Clean = %v", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "untouched" {
		t.Fatalf("the file behind the symlink holds %q (%v), want it untouched", b, err)
	}
	fi, err := os.Lstat(filepath.Join(commDir, mppod.MountExitName))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("mount.exit is %v (%v), want a regular file in place of the link", fi.Mode(), err)
	}
}
