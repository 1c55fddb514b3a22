package source

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/keymutex"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

// pods is a Pods whose Mountpoint Pod is replaced by the test.
type pods struct {
	mu  sync.Mutex
	pod *corev1.Pod
}

func (p *pods) set(pod *corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pod = pod
}

func (p *pods) Get(context.Context, string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pod, nil
}

func (p *pods) WaitServing(ctx context.Context, _ string, except types.UID) (*corev1.Pod, error) {
	for {
		if pod, _ := p.Get(ctx, ""); pod != nil && pod.UID != except {
			return pod, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// fixture is a kubelet dir holding a mounted source of Mountpoint Pod mp that no server serves,
// and that pod's comm dir.
type fixture struct {
	kubelet, mp, source string
	dev                 *os.File
	pods                *pods
	logs                *strings.Builder
	logMu               sync.Mutex
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	f := &fixture{kubelet: t.TempDir(), mp: mppod.Name(string(uuid.NewUUID()), "pv"), pods: &pods{}, logs: &strings.Builder{}}
	source, err := mppod.SourceDir(f.kubelet, f.mp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(source, 0o750); err != nil {
		t.Fatal(err)
	}
	dev, err := mount.FUSE(source, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mount.Detach(source)
		_ = dev.Close()
	})
	f.source, f.dev = source, dev
	f.pods.set(f.newPod(t))
	return f
}

// newPod returns a new Mountpoint Pod object of the fixture's name, with its comm dir made.
func (f *fixture) newPod(t *testing.T) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: f.mp, UID: uuid.NewUUID()}}
	if err := os.MkdirAll(f.commDir(t, pod), 0o750); err != nil {
		t.Fatal(err)
	}
	return pod
}

func (f *fixture) commDir(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	dir, err := CommDir(f.kubelet, string(pod.UID))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// sources returns Sources over the fixture, as a node-agent that just started.
func (f *fixture) sources(driver credentials.Profiles) *Sources {
	return New(Config{KubeletDir: f.kubelet, MounterUID: os.Getuid(), DriverProfiles: driver, ResumeWait: 10 * time.Second}, f.pods, &keymutex.Mutex{})
}

func (f *fixture) logged() string {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	return f.logs.String()
}

func (f *fixture) ctx(t *testing.T) context.Context {
	return logr.NewContext(t.Context(), funcr.New(func(prefix, args string) {
		f.logMu.Lock()
		defer f.logMu.Unlock()
		f.logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{}))
}

// mounter serves, on the comm dir of pod, what a mounter would: it answers a reattach with
// serving and the source's descriptors, and a resume with success; got receives the requests.
type mounter struct {
	ln   *net.UnixListener
	got  chan *handshake.Request
	mu   sync.Mutex
	conn *net.UnixConn
}

func (f *fixture) startMounter(t *testing.T, pod *corev1.Pod, serving *handshake.Request) *mounter {
	t.Helper()
	ln, err := handshake.Listen(filepath.Join(f.commDir(t, pod), mppod.MountSockName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	m := &mounter{ln: ln, got: make(chan *handshake.Request, 4)}
	state, err := unix.MemfdCreate("state", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(state) })
	go func() {
		for {
			conn, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			var req handshake.Request
			fds, err := handshake.Receive(conn, &req)
			for _, fd := range fds {
				_ = unix.Close(fd)
			}
			if err != nil {
				_ = conn.Close()
				continue
			}
			m.got <- &req
			resp := &handshake.Response{Version: handshake.Version}
			var rights []byte
			if req.Reattach {
				resp.Serving = serving
				rights = unix.UnixRights(int(f.dev.Fd()), state) //nolint:gosec // descriptors fit
			}
			frame, _ := handshake.EncodeFrame(resp)
			_, _, _ = conn.WriteMsgUnix(frame, rights, nil)
			m.mu.Lock()
			m.conn = conn
			m.mu.Unlock()
		}
	}()
	return m
}

// end ends the mounter as a crash does: its end of the handshake closes.
func (m *mounter) end() {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.ln.Close()
	if m.conn != nil {
		_ = m.conn.Close()
	}
}

func (m *mounter) next(t *testing.T, what string) *handshake.Request {
	t.Helper()
	select {
	case r := <-m.got:
		return r
	case <-time.After(15 * time.Second):
		t.Fatalf("no %s reached the mounter", what)
		return nil
	}
}

var sent = &handshake.Request{Version: handshake.Version, Bucket: "data", MaxRead: 1 << 20,
	Args: []string{"--read-only"}, Env: []string{"AWS_PROFILE=s3csi", "AWS_ENDPOINT_URL=https://ring.example"},
	ConfigFile:      filepath.Join(mppod.CredentialsName, credentials.ConfigFileName),
	CredentialsFile: filepath.Join(mppod.CredentialsName, credentials.CredentialsFileName), VolumeId: "vol"}

// A restarted node-agent keeps a source again only when its mounter gives back the request root
// recorded sending it; a mounter that answers with another bucket, endpoint or option (its pod
// compromised) keeps the connection alone, and nothing of its answer is ever sent on.
func TestAReattachKeepsOnlyWhatRootRecordedSending(t *testing.T) {
	evil := func(change func(*handshake.Request)) *handshake.Request {
		r := proto.CloneOf(sent)
		change(r)
		return r
	}
	for _, tc := range []struct {
		name     string
		recorded bool
		answer   *handshake.Request
		kept     int
		logged   string
	}{
		{"the request root sent", true, sent, 1, "Keeping the FUSE connection"},
		{"another bucket", true, evil(func(r *handshake.Request) { r.Bucket = "attacker" }), 0, "answered with another request"},
		{"another endpoint", true, evil(func(r *handshake.Request) {
			r.Env = []string{"AWS_PROFILE=s3csi", "AWS_ENDPOINT_URL=http://evil.example"}
		}), 0, "answered with another request"},
		{"an endpoint and a profile option", true, evil(func(r *handshake.Request) {
			r.Args = append(r.Args, "--endpoint-url=http://evil.example", "--profile=evil")
		}), 0, "answered with another request"},
		{"no record", false, sent, 0, "no record of the request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.recorded {
				if err := writeRecord(f.kubelet, f.mp, record{Request: sent, DriverCredentials: true}); err != nil {
					t.Fatal(err)
				}
			}
			pod, _ := f.pods.Get(t.Context(), "")
			f.startMounter(t, pod, tc.answer)
			s := f.sources(credentials.Profiles{})
			n, err := s.Reattach(f.ctx(t))
			if err != nil || n != tc.kept {
				t.Fatalf("Reattach kept %d, %v; want %d; logs:\n%s", n, err, tc.kept, f.logged())
			}
			if !strings.Contains(f.logged(), tc.logged) {
				t.Fatalf("the logs do not say %q:\n%s", tc.logged, f.logged())
			}
			if strings.Contains(f.logged(), "evil.example") || strings.Contains(f.logged(), "attacker") {
				t.Fatalf("the logs repeat what the mounter answered:\n%s", f.logged())
			}
		})
	}
}

// After a restart, the pod that replaces a Mountpoint Pod gets the request root recorded and the
// profile files root renders, never what the old pod wrote into its comm dir.
func TestTheNextMounterGetsRootsRequestAndProfilesNotTheOldPods(t *testing.T) {
	f := newFixture(t)
	if err := writeRecord(f.kubelet, f.mp, record{Request: sent, DriverCredentials: true}); err != nil {
		t.Fatal(err)
	}
	old, _ := f.pods.Get(t.Context(), "")
	first := f.startMounter(t, old, sent)
	// The old pod plants its own keys where root wrote the profile files.
	planted := credentials.Render(credentials.Static{AccessKeyID: "PLANTED", SecretAccessKey: "planted"}, "evil")
	if _, err := credentials.WriteProfiles(f.commDir(t, old), planted); err != nil {
		t.Fatal(err)
	}
	driver := credentials.Render(credentials.Static{AccessKeyID: "ROOT", SecretAccessKey: "root-secret"}, "us-east-1")
	s := f.sources(driver)
	if n, err := s.Reattach(f.ctx(t)); err != nil || n != 1 {
		t.Fatalf("Reattach kept %d, %v; want 1; logs:\n%s", n, err, f.logged())
	}
	first.next(t, "reattach request")

	fresh := f.newPod(t)
	second := f.startMounter(t, fresh, nil)
	f.pods.set(fresh)
	first.end()
	got := second.next(t, "resume request")
	if !got.Resume {
		t.Fatalf("the next mounter got %v; want a resume", got)
	}
	got.Resume = false
	if !proto.Equal(got, sent) {
		t.Fatalf("the next mounter got %v; want the request root recorded, %v", got, sent)
	}
	for name, want := range map[string][]byte{got.ConfigFile: driver.Config, got.CredentialsFile: driver.Credentials} {
		content, err := os.ReadFile(filepath.Join(f.commDir(t, fresh), name))
		if err != nil || string(content) != string(want) {
			t.Fatalf("the next pod's %s is not the one root renders (%v):\n%s", name, err, content)
		}
	}
}

// Root's record is its own: a root-only file that names the request and never a key; a record
// that does not decode or names an invalid request is refused, and one of a source no longer
// mounted is removed at start.
func TestRootsRecordIsPrivateHoldsNoKeyAndIsChecked(t *testing.T) {
	f := newFixture(t)
	if err := writeRecord(f.kubelet, f.mp, record{Request: sent}); err != nil {
		t.Fatal(err)
	}
	path, err := recordPath(f.kubelet, f.mp)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		st, err := os.Stat(p)
		if err != nil || st.Mode() != want {
			t.Fatalf("%s: %v, %v; want mode %v", p, st.Mode(), err, want)
		}
	}
	got, err := readRecord(f.kubelet, f.mp)
	if err != nil || !proto.Equal(got.Request, sent) {
		t.Fatalf("readRecord: %v, %v; want the request written", got.Request, err)
	}
	for name, content := range map[string]string{
		"not JSON":           "{",
		"an invalid request": `{"request":""}`,
		"too large":          strings.Repeat(" ", maxRecordSize+1),
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readRecord(f.kubelet, f.mp); err == nil || errors.Is(err, errNoRecord) {
			t.Errorf("a record holding %s was read: %v", name, err)
		}
	}
	if _, err := recordPath(f.kubelet, "../../etc"); err == nil {
		t.Error("a record path was built for a name that is not a Mountpoint Pod's")
	}

	gone := mppod.Name(string(uuid.NewUUID()), "pv")
	if err := writeRecord(f.kubelet, gone, record{Request: sent}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sources(credentials.Profiles{}).Reattach(f.ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := readRecord(f.kubelet, gone); !errors.Is(err, errNoRecord) {
		t.Fatalf("the record of a source no longer mounted is still there: %v", err)
	}
}

// Keep records the request it sent, and only once the mounter serves; the record never holds
// the keys, and it goes when the source's connection does.
func TestKeepRecordsTheRequestNeverAKey(t *testing.T) {
	f := newFixture(t)
	pod, _ := f.pods.Get(t.Context(), "")
	m := f.startMounter(t, pod, nil)
	s := f.sources(credentials.Profiles{})
	keys := credentials.Render(credentials.Static{AccessKeyID: "AKID", SecretAccessKey: "the-secret-key"}, "us-east-1")
	// The caller's request names no version: Keep's exchange sets it, and the record must hold
	// what the mounter received, or a restarted node-agent could never reattach.
	unversioned := proto.CloneOf(sent)
	unversioned.Version = 0
	if err := s.Keep(f.ctx(t), f.mp, pod, f.dev, Sent{Request: unversioned, Profiles: keys}); err != nil {
		t.Fatal(err)
	}
	m.next(t, "mount request")
	path, err := recordPath(f.kubelet, f.mp)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "the-secret-key") || strings.Contains(string(data), "AKID") {
		t.Fatalf("the record holds the keys: %s", data)
	}
	got, err := readRecord(f.kubelet, f.mp)
	if err != nil || !proto.Equal(got.Request, sent) || got.DriverCredentials {
		t.Fatalf("readRecord: %v, %v; want the request sent, with a volume's own keys", got, err)
	}
	_ = mount.Detach(f.source) // the source is unmounted: its connection ends
	m.end()
	testenv.Eventually(t, 10*time.Second, "the record of an unmounted source removed", func() bool {
		_, err := os.Stat(path)
		return errors.Is(err, os.ErrNotExist)
	})
}
