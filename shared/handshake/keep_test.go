package handshake_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
)

// fakeMounter listens on a comm dir's socket like a mounter and takes one request.
type fakeMounter struct {
	ln *net.UnixListener
}

func listenFake(t *testing.T, sock string) *fakeMounter {
	t.Helper()
	_ = os.Remove(sock)
	ln, err := handshake.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return &fakeMounter{ln: ln}
}

// taken is a request a fakeMounter took, with its descriptors.
type taken struct {
	req   handshake.Request
	fds   []int
	conn  *net.UnixConn
	state unix.Stat_t
}

// take accepts one request, answers it with errText (empty: serving) and returns it; the
// connection stays open, as a serving mounter keeps it.
func (m *fakeMounter) take(t *testing.T, errText string) *taken {
	t.Helper()
	_ = m.ln.SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := m.ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4+handshake.MaxFrameSize)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	got := &taken{conn: conn}
	if err := handshake.ReadFrame(bytes.NewReader(buf[:n]), &got.req); err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages %d, %v", len(msgs), err)
	}
	if got.fds, err = unix.ParseUnixRights(&msgs[0]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, fd := range got.fds {
			_ = unix.Close(fd)
		}
		_ = conn.Close()
	})
	if len(got.fds) == 2 {
		if err := unix.Fstat(got.fds[1], &got.state); err != nil {
			t.Fatal(err)
		}
	}
	frame, err := handshake.EncodeFrame(&handshake.Response{Version: handshake.Version, Error: errText})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	return got
}

// die ends the mounter that took r: its descriptors and its connection close.
func (r *taken) die() {
	for _, fd := range r.fds {
		_ = unix.Close(fd)
	}
	r.fds = nil
	_ = r.conn.Close()
}

// mountedFUSE mounts /dev/fuse on a new dir and returns the dir and the device file.
func mountedFUSE(t *testing.T) (string, *os.File) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	dir := t.TempDir()
	dev, err := mount.FUSE(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir, dev
}

// firstMounter mounts /dev/fuse, keeps it with o (Log and ResumeWait filled in when unset)
// through a fake mounter listening in a new comm dir, and returns the mount's dir, the socket, the
// Kept connection and the request the mounter took.
func firstMounter(t *testing.T, o handshake.KeepOptions) (string, string, *handshake.Kept, *taken) {
	t.Helper()
	dir, dev := mountedFUSE(t)
	sock := filepath.Join(t.TempDir(), "mount.sock")
	first := listenFake(t, sock)
	done := make(chan *taken, 1)
	go func() { done <- first.take(t, "") }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if o.Log.GetSink() == nil {
		o.Log = testr.New(t)
	}
	if o.ResumeWait == 0 {
		o.ResumeWait = time.Minute
	}
	k, err := handshake.Keep(ctx, sock, os.Getuid(), dev, &handshake.Request{Bucket: "b", MaxRead: 1 << 20}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	_ = dev.Close()
	a := <-done
	_ = first.ln.Close()
	return dir, sock, k, a
}

func waitDone(t *testing.T, k *handshake.Kept, within time.Duration, what string) {
	t.Helper()
	select {
	case <-k.Done():
	case <-time.After(within):
		t.Fatalf("the kept connection still holds its descriptors %s after %s", what, within)
	}
}

func TestKeptHandsTheConnectionToTheNextMounter(t *testing.T) {
	dir, sock, k, a := firstMounter(t, handshake.KeepOptions{})
	if len(a.fds) != 2 || a.req.Resume {
		t.Fatalf("first request: %d descriptors, resume %t; want 2, false", len(a.fds), a.req.Resume)
	}

	// The mounter dies; kubelet starts the next one on the same socket.
	a.die()
	second := listenFake(t, sock)
	b := second.take(t, "")
	if len(b.fds) != 2 || !b.req.Resume || b.req.Bucket != "b" {
		t.Fatalf("second request: %d descriptors, resume %t, bucket %q; want 2, true, b", len(b.fds), b.req.Resume, b.req.Bucket)
	}
	if b.state.Ino != a.state.Ino || b.state.Dev != a.state.Dev {
		t.Fatal("the next mounter got another state file than the first one recorded in")
	}
	if !handshake.Connected(dev2(t, b)) {
		t.Fatal("the FUSE connection ended while no mounter held it")
	}

	// Unmounted, then the mounter ends: nothing is left to hand over.
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	b.die()
	waitDone(t, k, 5*time.Second, "after the mounter of an unmounted source ended")
}

// A mounter that hands its mount over (its pod is deleted) says so and ends; its comm dir goes
// with its pod while Next still names it, and Next then names the pod that replaces it.
func TestKeptFollowsAHandOverToTheMountpointPodThatReplacesTheFirst(t *testing.T) {
	nextSock := filepath.Join(t.TempDir(), "mount.sock")
	var oldSock string
	var mu sync.Mutex
	var asked []bool // handedOver of each call of Next
	resumed := make(chan handshake.Resumption, 1)
	_, sock, _, a := firstMounter(t, handshake.KeepOptions{
		Next: func(_ context.Context, handedOver bool) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, handedOver)
			if len(asked) == 1 {
				return oldSock, nil // the pod watch has not seen the old pod go yet
			}
			return nextSock, nil // and again when the next mounter ends, as the test ends
		},
		Resumed: func(r handshake.Resumption) { resumed <- r },
	})
	oldSock = sock
	frame, err := handshake.EncodeFrame(&handshake.Response{Version: handshake.Version, HandedOver: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	a.die()
	if err := os.RemoveAll(filepath.Dir(sock)); err != nil {
		t.Fatal(err)
	}
	b := listenFake(t, nextSock).take(t, "")
	if len(b.fds) != 2 || !b.req.Resume || b.state.Ino != a.state.Ino {
		t.Fatalf("request in the new pod: %d descriptors, resume %t, same state file %t; want 2, true, true",
			len(b.fds), b.req.Resume, b.state.Ino == a.state.Ino)
	}
	select {
	case r := <-resumed:
		if !r.HandedOver {
			t.Error("Resumed says the first mounter died; it handed the mount over")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Resumed was not called")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || !asked[0] || !asked[1] {
		t.Errorf("Next was asked with handedOver %v, want [true true] (the old pod's socket, then the new pod's)", asked)
	}
}

func TestKeptClosesTheConnectionWhenNoMounterTakesItOver(t *testing.T) {
	dir, _, k, a := firstMounter(t, handshake.KeepOptions{ResumeWait: 300 * time.Millisecond})
	a.die()
	waitDone(t, k, 5*time.Second, "when no mounter came")
	// With no holder left, the kernel ended the connection: the mount answers ENOTCONN.
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); !errors.Is(err, unix.ENOTCONN) {
		t.Fatalf("statfs of the mount = %v, want ENOTCONN once no one holds the connection", err)
	}
}

// The source is unmounted (its workloads left) while the connection waits for the pod that
// replaces the first one: nothing is left to hand over, whatever ResumeWait says.
func TestKeptLetsGoWhenTheSourceIsUnmountedWhileItWaits(t *testing.T) {
	waiting := make(chan struct{})
	dir, _, k, a := firstMounter(t, handshake.KeepOptions{
		ResumeWait: time.Hour,
		Next: func(ctx context.Context, _ bool) (string, error) {
			close(waiting)
			<-ctx.Done() // no pod replaces the first one
			return "", ctx.Err()
		},
	})
	a.die()
	<-waiting
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	waitDone(t, k, 5*time.Second, "after its source was unmounted")
}

func TestKeptGivesUpWhenTheCommDirGoes(t *testing.T) {
	_, sock, k, a := firstMounter(t, handshake.KeepOptions{ResumeWait: time.Hour})
	a.die()
	if err := os.RemoveAll(filepath.Dir(sock)); err != nil {
		t.Fatal(err)
	}
	waitDone(t, k, 5*time.Second, "after its Mountpoint Pod's comm dir went")
}

func TestKeptClosesTheConnectionWhenTheNextMounterRefusesIt(t *testing.T) {
	dir, sock, k, a := firstMounter(t, handshake.KeepOptions{})
	a.die()
	b := listenFake(t, sock).take(t, "the state file is damaged")
	b.die()
	waitDone(t, k, 5*time.Second, "after the next mounter refused the connection")
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); !errors.Is(err, unix.ENOTCONN) {
		t.Fatalf("statfs of the mount = %v, want ENOTCONN", err)
	}
}

// dev2 is the /dev/fuse descriptor the mounter that took r received.
func dev2(t *testing.T, r *taken) *os.File {
	t.Helper()
	fd, err := unix.Dup(r.fds[0])
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "/dev/fuse")
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// A restarted node-agent gets the connection back from the mounter (Reattach), which is outside
// its trust: what comes back must be a /dev/fuse descriptor, a regular state file and the very
// request the node-agent recorded sending, or nothing is kept.
func TestReattachKeepsOnlyAFUSEDescriptorAndAStateFile(t *testing.T) {
	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open /dev/fuse: %v (run as root, with /dev/fuse)", err)
	}
	defer fuse.Close()
	state, err := unix.MemfdCreate("state", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(state)
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	huge, err := unix.MemfdCreate("huge-state", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(huge)
	if err := unix.Ftruncate(huge, handshake.MaxStateSize+1); err != nil {
		t.Fatal(err)
	}
	valid := &handshake.Request{Version: handshake.Version, Bucket: "b", MaxRead: 1 << 20,
		Args: []string{"--read-only"}, Env: []string{"AWS_PROFILE=s3csi", "AWS_ENDPOINT_URL=https://ring.example"}}
	hostile := func(change func(r *handshake.Request)) *handshake.Request {
		r := proto.CloneOf(valid)
		change(r)
		return r
	}
	for _, tc := range []struct {
		name    string
		fds     []int
		serving *handshake.Request
		kept    bool
	}{
		{"/dev/fuse and a memfd", []int{int(fuse.Fd()), state}, valid, true},
		{"a pipe instead of /dev/fuse", []int{pipe[0], state}, valid, false},
		{"a pipe instead of the state file", []int{int(fuse.Fd()), pipe[0]}, valid, false},
		{"one descriptor", []int{int(fuse.Fd())}, valid, false},
		{"an invalid request", []int{int(fuse.Fd()), state}, &handshake.Request{Version: handshake.Version}, false},
		{"another bucket", []int{int(fuse.Fd()), state}, hostile(func(r *handshake.Request) { r.Bucket = "attacker" }), false},
		{"an endpoint option", []int{int(fuse.Fd()), state}, hostile(func(r *handshake.Request) {
			r.Args = append(r.Args, "--endpoint-url=http://evil.example", "--profile=evil")
		}), false},
		{"another endpoint", []int{int(fuse.Fd()), state}, hostile(func(r *handshake.Request) {
			r.Env = []string{"AWS_PROFILE=s3csi", "AWS_ENDPOINT_URL=http://evil.example"}
		}), false},
		{"other profile files", []int{int(fuse.Fd()), state}, hostile(func(r *handshake.Request) { r.CredentialsFile = "planted" }), false},
		{"a resume flag", []int{int(fuse.Fd()), state}, hostile(func(r *handshake.Request) { r.Resume = true }), true},
		{"a state file over MaxStateSize", []int{int(fuse.Fd()), huge}, valid, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "mount.sock")
			m := listenFake(t, sock)
			go func() {
				conn, err := m.ln.AcceptUnix()
				if err != nil {
					return
				}
				defer conn.Close()
				var req handshake.Request
				if _, err := handshake.Receive(conn, &req); err != nil || !req.Reattach {
					return
				}
				frame, _ := handshake.EncodeFrame(&handshake.Response{Version: handshake.Version, Serving: tc.serving})
				_, _, _ = conn.WriteMsgUnix(frame, unix.UnixRights(tc.fds...), nil)
				_, _ = conn.Read(make([]byte, 1)) // serve until the test ends
			}()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			k, err := handshake.Reattach(ctx, sock, os.Getuid(), valid, handshake.KeepOptions{Log: testr.New(t)})
			if (err == nil) != tc.kept {
				t.Fatalf("Reattach: %v; want kept %t", err, tc.kept)
			}
			if tc.serving != valid && !tc.kept && len(tc.fds) == 2 && tc.fds[1] == state && !errors.Is(err, handshake.ErrAnswerDiffers) {
				t.Errorf("Reattach of an answer naming another request: %v; want ErrAnswerDiffers", err)
			}
			if k != nil {
				if got := k.Request(); !proto.Equal(got, valid) {
					t.Errorf("the kept request is %v; want the one sent, %v", got, valid)
				}
				k.Close()
			}
		})
	}
}

// acceptResume takes the resume request on m and answers it after delay (never, when negative);
// it returns when the answer is sent or the test ends.
func (m *fakeMounter) acceptResume(t *testing.T, delay time.Duration) {
	conn, err := m.ln.AcceptUnix()
	if err != nil {
		return
	}
	defer conn.Close()
	var req handshake.Request
	fds, err := handshake.Receive(conn, &req)
	for _, fd := range fds {
		defer unix.Close(fd)
	}
	if err != nil || !req.Resume {
		t.Errorf("the next mounter got %v, %v; want a resume request", &req, err)
		return
	}
	if delay < 0 {
		_, _ = conn.Read(make([]byte, 1)) // until the keeper gives up
		return
	}
	time.Sleep(delay)
	frame, _ := handshake.EncodeFrame(&handshake.Response{Version: handshake.Version})
	_, _ = conn.Write(frame)
	_, _ = conn.Read(make([]byte, 1)) // serve until the test ends
}

// A resume's replay is budgeted apart from the wait for the next mounter: a mounter that
// listens late in ResumeWait and answers after more than ResumeWait (a long replay) takes the
// connection over; one that never answers ends it after ReplayWait, and the connection is not
// sent to another mounter meanwhile.
func TestAResumeBudgetsTheReplayApartFromTheWaitForTheNextMounter(t *testing.T) {
	t.Run("a long replay", func(t *testing.T) {
		resumed := make(chan handshake.Resumption, 1)
		_, sock, _, a := firstMounter(t, handshake.KeepOptions{ResumeWait: 500 * time.Millisecond, ReplayWait: 10 * time.Second,
			Resumed: func(r handshake.Resumption) { resumed <- r }})
		a.die()
		time.Sleep(300 * time.Millisecond)
		next := listenFake(t, sock)
		go next.acceptResume(t, 1500*time.Millisecond)
		select {
		case <-resumed:
		case <-time.After(10 * time.Second):
			t.Fatal("the next mounter, which answered 1.5 s after receiving the connection, did not take it over")
		}
	})
	t.Run("no answer", func(t *testing.T) {
		_, sock, k, a := firstMounter(t, handshake.KeepOptions{ResumeWait: 5 * time.Second, ReplayWait: 500 * time.Millisecond})
		a.die()
		next := listenFake(t, sock)
		go next.acceptResume(t, -1)
		waitDone(t, k, 5*time.Second, "when the mounter that received it never answered")
		_ = next.ln.SetDeadline(time.Now().Add(time.Second))
		if conn, err := next.ln.AcceptUnix(); err == nil {
			_ = conn.Close()
			t.Fatal("the connection was sent again after a mounter that received it did not answer")
		}
	})
}
