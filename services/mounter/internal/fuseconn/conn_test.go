package fuseconn

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/mount"
)

func TestMain(m *testing.M) {
	if os.Getenv("FUSECONN_SERVER") != "" {
		os.Exit(serverMain())
	}
	os.Exit(m.Run())
}

func signalNotify(c chan os.Signal) { signal.Notify(c, syscall.SIGTERM) }

// connection is a mounted FUSE connection whose servers run as child processes, as the node-agent
// holds a Mountpoint Pod's connection: the test process keeps the descriptor and the journal.
type connection struct {
	t       *testing.T
	dir     string
	dev     *os.File
	journal *os.File
}

func mountConnection(t *testing.T) *connection {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil || os.Geteuid() != 0 {
		t.Fatalf("these tests mount FUSE: run them as root on a machine with /dev/fuse (%v)", err)
	}
	dir := t.TempDir()
	dev, err := mount.FUSE(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.MemfdCreate("fuseconn-journal", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	c := &connection{t: t, dir: dir, dev: dev, journal: os.NewFile(uintptr(fd), "journal")}
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := table.Lookup(dir)
	if !ok {
		t.Fatalf("%s is not in the mount table", dir)
	}
	t.Cleanup(func() {
		// Abort the connection first: a reader of a failed test must not wait forever. Only
		// while this mount still holds the connection's number: once it is gone, the number
		// may name the mount of a test running beside this one.
		if now, err := mount.ReadTable(); err == nil {
			if still, ok := now.Lookup(dir); ok && still.Minor == e.Minor {
				abortConnection(t, e.Minor)
			}
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		_ = c.dev.Close()
		_ = c.journal.Close()
	})
	return c
}

// abortConnection aborts FUSE connection id through fusectl, mounting fusectl if needed.
func abortConnection(t *testing.T, id int) {
	const ctl = "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(ctl, "..")); err == nil {
		_ = unix.Mount("fusectl", ctl, "fusectl", 0, "") // EBUSY when mounted already
	}
	if err := os.WriteFile(filepath.Join(ctl, fmt.Sprint(id), "abort"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("abort FUSE connection %d: %v", id, err)
	}
}

// server is a child process serving the connection.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	exited chan error
	stderr *bytes.Buffer
	// served is the line the server wrote once it served: what it replayed.
	served string
}

// spawn starts a server process that waits for begin; resume makes it resume from the journal.
//
// Problem: starting a process closes, at exec, the test process's descriptors of files in the
// mount, and each close sends the kernel's FLUSH to the FUSE server: with no server, exec hangs.
// Solution: a replacement is started while the old server still serves, and begins on a word.
func (c *connection) spawn(resume bool, env ...string) *server {
	c.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FUSECONN_SERVER=1")
	if resume {
		cmd.Env = append(cmd.Env, "FUSECONN_RESUME=1")
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.ExtraFiles = []*os.File{c.dev, c.journal}
	s := &server{t: c.t, cmd: cmd, exited: make(chan error, 1), stderr: &bytes.Buffer{}}
	cmd.Stderr = s.stderr
	var err error
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		c.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	s.stdout = bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { s.exited <- cmd.Wait() }()
	c.t.Cleanup(func() { _ = cmd.Process.Kill() })
	return s
}

// begin lets the server serve and returns once it answered INIT or resumed.
func (s *server) begin() {
	s.t.Helper()
	if _, err := io.WriteString(s.stdin, "begin\n"); err != nil {
		s.t.Fatal(err)
	}
	if s.served, _ = s.stdout.ReadString('\n'); !strings.HasPrefix(s.served, "serving ") {
		s.t.Fatalf("the server did not start: %q, stderr: %s", s.served, s.stderr)
	}
}

func (c *connection) start(resume bool, env ...string) *server {
	c.t.Helper()
	s := c.spawn(resume, env...)
	s.begin()
	return s
}

// workload reads "big" and lists "many/" through the mount until both are done.
type workload struct {
	read     atomic.Int64
	listings atomic.Int64
	maxPause atomic.Int64 // longest single read, in nanoseconds
	done     chan error
}

func (c *connection) startWorkload(listings int) *workload {
	w := &workload{done: make(chan error, 2)}
	go func() { w.done <- w.readBig(filepath.Join(c.dir, "big")) }()
	go func() { w.done <- w.list(filepath.Join(c.dir, "many"), listings) }()
	return w
}

func (w *workload) readBig(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, 1<<20)
	var off int64
	for {
		start := time.Now()
		n, err := f.Read(buf)
		if d := int64(time.Since(start)); d > w.maxPause.Load() {
			w.maxPause.Store(d)
		}
		if n > 0 && !bytes.Equal(buf[:n], contentAt(off, n)) {
			return fmt.Errorf("read %d bytes at %d: wrong content", n, off)
		}
		off += int64(n)
		w.read.Store(off)
		switch {
		case errors.Is(err, io.EOF):
			if off != bigSize {
				return fmt.Errorf("read %d bytes of %d", off, bigSize)
			}
			return nil
		case err != nil:
			return fmt.Errorf("read at %d: %w", off, err)
		}
	}
}

func (w *workload) list(dir string, times int) error {
	for range times {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		if len(entries) != manyFiles {
			return fmt.Errorf("listed %d entries, want %d", len(entries), manyFiles)
		}
		for i, e := range entries {
			info, err := e.Info()
			if err != nil {
				return fmt.Errorf("stat %s: %w", e.Name(), err)
			}
			if info.Size() != int64(i) {
				return fmt.Errorf("%s has %d bytes, want %d", e.Name(), info.Size(), i)
			}
		}
		w.listings.Add(1)
	}
	return nil
}

func (w *workload) wait(t *testing.T) {
	t.Helper()
	for range 2 {
		select {
		case err := <-w.done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(3 * time.Minute):
			t.Fatal("the workload did not finish in 3 minutes")
		}
	}
	t.Logf("longest read: %v", time.Duration(w.maxPause.Load()))
}

func (w *workload) waitFor(t *testing.T, bytes int64, listings int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for w.read.Load() < bytes || w.listings.Load() < listings {
		if time.Now().After(deadline) {
			t.Fatalf("the workload read %d bytes and listed %d times in a minute", w.read.Load(), w.listings.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHandoverUnderAReaderAndAListerIsAPause(t *testing.T) {
	c := mountConnection(t)
	a := c.start(false)
	w := c.startWorkload(20)
	w.waitFor(t, bigSize/4, 2)
	b := c.spawn(true)
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-a.exited; err != nil {
		t.Fatalf("the stopped server failed: %v, stderr: %s", err, a.stderr)
	}
	readAtStop := w.read.Load()
	b.begin()
	w.wait(t)
	if readAtStop >= bigSize {
		t.Errorf("the reader had finished before the handover")
	}
}

func TestAKilledServerIsResumedAndItsReadersGoOn(t *testing.T) {
	c := mountConnection(t)
	// Slow reads keep requests in flight when the server dies: the kernel must resend them.
	a := c.start(false, "FUSECONN_READ_DELAY=2ms")
	w := c.startWorkload(20)
	w.waitFor(t, bigSize/8, 2)
	b := c.spawn(true)
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-a.exited; err == nil {
		t.Error("the killed server exited with status 0")
	}
	readAtKill := w.read.Load()
	b.begin()
	w.wait(t)
	if readAtKill >= bigSize {
		t.Errorf("the reader had finished before the kill")
	}
}

func TestHandlesThatCannotBeRestoredFailAloneWithESTALE(t *testing.T) {
	c := mountConnection(t)
	a := c.start(false)
	gone, err := os.Open(filepath.Join(c.dir, "gone"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gone.Close() }()
	sink, err := os.OpenFile(filepath.Join(c.dir, "sink"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sink.Close() }()
	if _, err := sink.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	w := c.startWorkload(5)
	w.waitFor(t, bigSize/8, 1)
	// The next server has no "gone"; and no server can carry another's open writer.
	b := c.spawn(true, "FUSECONN_HIDE=gone")
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-a.exited; err == nil {
		t.Error("the killed server exited with status 0")
	}
	b.begin()
	if _, err := sink.Write([]byte("after")); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("write to a handle of the dead server: %v, want ESTALE", err)
	}
	if _, err := gone.ReadAt(make([]byte, 10), 0); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("read of a file the new server does not have: %v, want ESTALE", err)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "gone")); !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ESTALE) {
		t.Errorf("stat of a file the new server does not have: %v", err)
	}
	w.wait(t)
	// The file being written when its server died fails at close: its upload is lost.
	if err := sink.Close(); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("close of a file the dead server was writing: %v, want ESTALE", err)
	}
	// Everything else still works: open, read, list.
	f, err := os.Open(filepath.Join(c.dir, "many", "f0007"))
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
}

func TestResumeRefusesAServerThatNegotiatesDifferently(t *testing.T) {
	c := mountConnection(t)
	c.start(false)
	if _, err := os.Stat(filepath.Join(c.dir, "big")); err != nil {
		t.Fatal(err)
	}
	mo := testMountOptions()
	mo.MaxWrite = 128 << 10
	dup, err := unix.Dup(int(c.dev.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(dup) }()
	_, err = Resume(dup, newTestFS("", 0, 0), mo, Options{Journal: c.journal})
	if err == nil || !strings.Contains(err.Error(), "INIT differently") {
		t.Fatalf("resume with another max_write: %v, want a refusal", err)
	}
}

func TestJournalReadsUpToATornRecordAndSurvivesCompaction(t *testing.T) {
	fd, err := unix.MemfdCreate("journal", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "journal")
	defer func() { _ = f.Close() }()
	s := newState()
	s.forward = func([]byte) {}
	if s.j, err = newJournal(f); err != nil {
		t.Fatal(err)
	}
	s.initIn, s.initOut = []byte("init"), []byte("reply")
	_ = s.j.append(append([]byte{recInit}, s.initIn...), append([]byte{recInitReply}, s.initOut...))
	// Enough lookups and forgets to compact several times.
	for i := range 100000 {
		id := uint64(100 + i%50)
		s.lookup(id, 0, rootID, fmt.Sprint(id), 1, 1, false)
		if i%3 == 0 {
			s.forgetOne(id, 1)
		}
		s.open(uint64(1+i%7), id, 0, false, false, []byte(fmt.Sprint("v", i)))
	}
	if s.j.start == headerSize {
		t.Fatal("the journal never compacted")
	}
	got := load(t, f)
	if !sameState(got, s) {
		t.Fatalf("the journal read back differs from the state")
	}
	// A torn record at the end is ignored, and so is a checkpoint the header never pointed at.
	s.mu.Lock()
	end := s.j.end
	s.mu.Unlock()
	if _, err := f.WriteAt(frame(nil, []byte{recCheckpoint}), end); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{200, 0, 0, 0, 1, 2}, end+int64(len(frame(nil, []byte{recCheckpoint})))); err != nil {
		t.Fatal(err)
	}
	if !sameState(load(t, f), s) {
		t.Fatalf("a torn tail changed the state read back")
	}
}

func load(t *testing.T, f *os.File) *state {
	t.Helper()
	recs, _, err := readJournal(f)
	if err != nil {
		t.Fatal(err)
	}
	s := newState()
	for _, r := range recs {
		if err := s.apply(r); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func sameState(a, b *state) bool {
	if !bytes.Equal(a.initIn, b.initIn) || !bytes.Equal(a.initOut, b.initOut) || len(a.nodes) != len(b.nodes) || len(a.files) != len(b.files) {
		return false
	}
	for id, n := range a.nodes {
		m := b.nodes[id]
		if m == nil || m.kernel != n.kernel || m.parent != n.parent || m.name != n.name || m.stale != n.stale {
			return false
		}
	}
	keys := make([]uint64, 0, len(a.files))
	for fh := range a.files {
		keys = append(keys, fh)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, fh := range keys {
		g, f := b.files[fh], a.files[fh]
		if g == nil || g.node != f.node || g.flags != f.flags || g.dir != f.dir || g.stale != f.stale || !bytes.Equal(g.version, f.version) {
			return false
		}
	}
	return true
}

// A journal that names an absurd file handle (written by a compromised mounter) is refused at
// once by the next one, which would otherwise fill the gap below it one placeholder at a time
// until it ran out of memory.
func TestResumeRefusesAHostileJournalAtOnce(t *testing.T) {
	c := mountConnection(t)
	c.start(false)
	if _, err := os.Stat(filepath.Join(c.dir, "big")); err != nil {
		t.Fatal(err)
	}
	st, err := c.journal.Stat()
	if err != nil {
		t.Fatal(err)
	}
	hostile := openRec(1<<40, &handle{node: rootID, dir: true})
	if _, err := c.journal.WriteAt(frame(nil, hostile), st.Size()); err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(c.dev.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(dup) }()
	done := make(chan error, 1)
	go func() {
		_, err := Resume(dup, newTestFS("", 0, 0), testMountOptions(), Options{Journal: c.journal})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "file handle") {
			t.Fatalf("resume from a journal naming handle 2^40: %v, want a refusal", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("resume from a journal naming handle 2^40 still runs after 20 s")
	}
}

// A write open that arrives while a hand-over is prepared waits, is left unanswered by the
// server that stops, and is served by the next one: the application sees a pause, never a file
// opened by a server that is going (which failed with ESTALE under the next one).
func TestAWriteOpenHeldDuringAHandOverIsServedByTheNextServer(t *testing.T) {
	c := mountConnection(t)
	a := c.start(false)
	if _, err := os.Stat(filepath.Join(c.dir, "big")); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if line, _ := a.stdout.ReadString('\n'); line != "holding\n" {
		t.Fatalf("the server did not start holding: %q", line)
	}
	opened := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(filepath.Join(c.dir, "big"), os.O_WRONLY, 0)
		if err == nil {
			_, err = f.Write([]byte("x"))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("a write open went through the hold: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	b := c.spawn(true)
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-a.exited; err != nil {
		t.Fatalf("the stopped server failed: %v, stderr: %s", err, a.stderr)
	}
	select {
	case err := <-opened:
		t.Fatalf("the held write open was answered by the server that stopped: %v", err)
	default:
	}
	b.begin()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("the held write open, served by the next server: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held write open was not served by the next server within 10 s")
	}
}

// TestAResumeRestoresFiftyThousandNodeIDsBehindASlowFilesystem: a workload walked a directory of
// 50,000 files, so the kernel holds 50,000 node ids; the server that takes the connection over
// looks each up again, and each lookup takes 5 ms (an S3 round trip). The replay restores every
// one with none stale, in the time it takes is logged; the files answer after the resume.
func TestAResumeRestoresFiftyThousandNodeIDsBehindASlowFilesystem(t *testing.T) {
	c := mountConnection(t)
	a := c.start(false)
	start := time.Now()
	for i := range wideFiles {
		if _, err := os.Stat(filepath.Join(c.dir, "wide", wideName(i))); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the kernel looked up %d files in %s", wideFiles, time.Since(start).Round(time.Millisecond))
	b := c.spawn(true, "FUSECONN_LOOKUP_DELAY=5ms")
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-a.exited; err != nil {
		t.Fatalf("the stopped server failed: %v, stderr: %s", err, a.stderr)
	}
	start = time.Now()
	b.begin()
	resumed := time.Since(start)
	var nodes, stale int
	var tookText string
	if _, err := fmt.Sscanf(b.served, "serving nodes=%d staleNodes=%d took=%s", &nodes, &stale, &tookText); err != nil {
		t.Fatalf("parse %q: %v", b.served, err)
	}
	t.Logf("the next server replayed %d node ids (%d stale) in %s; it served %s after it began",
		nodes, stale, tookText, resumed.Round(time.Millisecond))
	if nodes < wideFiles || stale != 0 {
		t.Fatalf("the replay restored %d node ids with %d stale; want at least %d, none stale", nodes, stale, wideFiles)
	}
	for i := 0; i < wideFiles; i += 997 {
		if st, err := os.Stat(filepath.Join(c.dir, "wide", wideName(i))); err != nil || st.Size() != int64(i) {
			t.Fatalf("stat of %s after the resume: %v, %v", wideName(i), st, err)
		}
	}
}

// A journal whose node ids name each other as parents (the root among them) makes the next
// server's replay end, each node looked up once, instead of walking the cycle for ever; the
// nodes the kernel really holds are restored.
func TestAReplayEndsOnAJournalWhoseParentsFormACycle(t *testing.T) {
	c := mountConnection(t)
	a := c.start(false)
	if _, err := os.Stat(filepath.Join(c.dir, "many")); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-a.exited; err != nil {
		t.Fatalf("the stopped server failed: %v, stderr: %s", err, a.stderr)
	}
	st, err := c.journal.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// The root, as a child of "many", which is a child of the root.
	cycle := nodeRec(rootID, &node{parent: ino("many"), name: "f0001"}, 1)
	if _, err := c.journal.WriteAt(frame(nil, cycle), st.Size()); err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(c.dev.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(dup) }()
	type resumed struct {
		conn *Conn
		err  error
	}
	done := make(chan resumed, 1)
	go func() {
		conn, err := Resume(dup, newTestFS("", 0, 0), testMountOptions(), Options{Journal: c.journal})
		done <- resumed{conn, err}
	}()
	select {
	case r := <-done:
		if r.conn == nil {
			t.Fatalf("resume from a journal whose parents form a cycle: %v", r.err)
		}
		defer r.conn.Stop()
		if got := r.conn.Replayed(); got.Nodes == 0 || got.StaleNodes != 0 {
			t.Fatalf("the replay restored %d node ids with %d stale; want \"many\", not stale", got.Nodes, got.StaleNodes)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the replay of a journal whose parents form a cycle still runs after 20 s")
	}
}

// An unmount ends the connection cleanly while the kernel still queues requests (the RELEASEs
// of files just closed): a read of /dev/fuse that takes a request at the moment the unmount shuts
// the connection fails with ECONNABORTED instead of ENODEV, and that too is the connection's end.
func TestAnUnmountWithRequestsQueuedEndsTheConnectionCleanly(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil || os.Geteuid() != 0 {
		t.Fatalf("this test mounts FUSE: run it as root on a machine with /dev/fuse (%v)", err)
	}
	for round := range 200 {
		dir := t.TempDir()
		dev, err := mount.FUSE(dir, false)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Serve(int(dev.Fd()), newTestFS("", 0, 0), testMountOptions(), Options{}) //nolint:gosec // a descriptor fits
		if err != nil {
			t.Fatal(err)
		}
		// Raw descriptors: os.Open would register them with the runtime's poller, whose POLL
		// request this process would then have to answer while it waits on it.
		fds := make([]int, 64)
		for i := range fds {
			if fds[i], err = unix.Open(filepath.Join(dir, "sink"), unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
				t.Fatal(err)
			}
		}
		for _, fd := range fds {
			_ = unix.Close(fd) // the kernel sends RELEASE in the background
		}
		if err := unix.Unmount(dir, 0); err != nil {
			t.Fatal(err)
		}
		werr := c.Wait()
		_ = dev.Close()
		if werr != nil {
			t.Fatalf("round %d: the connection ended with %v after an unmount, want nil", round, werr)
		}
	}
}
