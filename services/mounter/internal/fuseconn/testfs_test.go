package fuseconn

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The test filesystem: "big", a large file whose bytes are a function of their offset (so that a
// reader can check what it read without a copy), "many/", a directory of small files, "wide/", a
// directory of 50,000 whose lookups take lookupDelay (an S3 round trip), "gone", a file a server
// started with hide=gone does not have, and "sink", a file that accepts writes. Node ids are
// inode numbers derived from names, as s3fs derives them from keys.
const (
	bigSize   = 1 << 30
	manyFiles = 2000
	wideFiles = 50000
)

// period is prime, so that no two 1 MiB reads at different offsets of "big" return the same bytes.
const period = 1048573

// content holds every run of bytes a read can return: "big" at offset off is content[off%period:].
var content = func() []byte {
	b := make([]byte, period+1<<20)
	x := uint32(2463534242)
	for i := range b[:period] {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	copy(b[period:], b)
	return b
}()

// contentAt is what a read of n bytes at off must return.
func contentAt(off int64, n int) []byte {
	o := off % period
	return content[o : o+int64(n)]
}

func ino(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()>>1 | 2
}

type testRoot struct {
	fs.Inode
	hide                   string
	readDelay, lookupDelay time.Duration
}

var _ = (fs.NodeLookuper)((*testRoot)(nil))

func (r *testRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if name == r.hide {
		return nil, syscall.ENOENT
	}
	switch name {
	case "big", "gone", "sink":
		size := int64(bigSize)
		if name != "big" {
			size = 4096
		}
		f := &testFile{size: size, delay: r.readDelay}
		out.Mode, out.Size = syscall.S_IFREG|0o644, uint64(size) //nolint:gosec // positive
		return r.NewInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG, Ino: ino(name)}), 0
	case "many":
		out.Mode = syscall.S_IFDIR | 0o755
		return r.NewInode(ctx, &testDir{}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino(name)}), 0
	case "wide":
		out.Mode = syscall.S_IFDIR | 0o755
		return r.NewInode(ctx, &wideDir{delay: r.lookupDelay}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino(name)}), 0
	}
	return nil, syscall.ENOENT
}

type testDir struct{ fs.Inode }

var (
	_ = (fs.NodeLookuper)((*testDir)(nil))
	_ = (fs.NodeReaddirer)((*testDir)(nil))
)

func manyName(i int) string { return fmt.Sprintf("f%04d", i) }

func (d *testDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var i int
	if _, err := fmt.Sscanf(name, "f%04d", &i); err != nil || i < 0 || i >= manyFiles || manyName(i) != name {
		return nil, syscall.ENOENT
	}
	out.Mode, out.Size = syscall.S_IFREG|0o644, uint64(i) //nolint:gosec // positive
	return d.NewInode(ctx, &testFile{size: int64(i)}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: ino("many/" + name)}), 0
}

func (d *testDir) Readdir(context.Context) (fs.DirStream, syscall.Errno) {
	entries := make([]fuse.DirEntry, manyFiles)
	for i := range entries {
		entries[i] = fuse.DirEntry{Name: manyName(i), Mode: syscall.S_IFREG, Ino: ino("many/" + manyName(i))}
	}
	return fs.NewListDirStream(entries), 0
}

// wideDir is "wide/": files w00000 to w49999, each lookup taking delay.
type wideDir struct {
	fs.Inode
	delay time.Duration
}

var _ = (fs.NodeLookuper)((*wideDir)(nil))

func wideName(i int) string { return fmt.Sprintf("w%05d", i) }

func (d *wideDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var i int
	if _, err := fmt.Sscanf(name, "w%05d", &i); err != nil || i < 0 || i >= wideFiles || wideName(i) != name {
		return nil, syscall.ENOENT
	}
	if d.delay > 0 {
		select {
		case <-time.After(d.delay):
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
	}
	out.Mode, out.Size = syscall.S_IFREG|0o644, uint64(i) //nolint:gosec // positive
	return d.NewInode(ctx, &testFile{size: int64(i)}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: ino("wide/" + name)}), 0
}

type testFile struct {
	fs.Inode
	size  int64
	delay time.Duration
}

var (
	_ = (fs.NodeOpener)((*testFile)(nil))
	_ = (fs.NodeReader)((*testFile)(nil))
	_ = (fs.NodeWriter)((*testFile)(nil))
	_ = (fs.NodeGetattrer)((*testFile)(nil))
)

type writeHandle struct{}

func (f *testFile) Open(_ context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return writeHandle{}, fuse.FOPEN_DIRECT_IO, 0
	}
	return nil, 0, 0
}

func (f *testFile) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode, out.Size = syscall.S_IFREG|0o644, uint64(f.size) //nolint:gosec // positive
	return 0
}

func (f *testFile) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, syscall.EINTR
		}
	}
	n := min(int64(len(dest)), max(f.size-off, 0))
	return fuse.ReadResultData(contentAt(off, int(n))), 0
}

func (f *testFile) Write(_ context.Context, _ fs.FileHandle, data []byte, _ int64) (uint32, syscall.Errno) {
	return uint32(len(data)), 0 //nolint:gosec // at most 1 MiB
}

func testMountOptions() *fuse.MountOptions {
	return &fuse.MountOptions{
		MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, DisableReadDirPlus: true, DisableXAttrs: true,
		DisableSplice: true, MaxBackground: 64,
	}
}

func newTestFS(hide string, readDelay, lookupDelay time.Duration) fuse.RawFileSystem {
	ttl := time.Second
	return fs.NewNodeFS(&testRoot{hide: hide, readDelay: readDelay, lookupDelay: lookupDelay}, &fs.Options{
		ExternalNodeID: true, EntryTimeout: &ttl, AttrTimeout: &ttl,
		MountOptions: *testMountOptions(),
	})
}

// serverMain is the server process of the tests: it serves (or, with FUSECONN_RESUME set,
// resumes) the connection of descriptor 3 with the journal of descriptor 4, stops on SIGTERM and
// exits when the connection ends.
func serverMain() int {
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1
	}
	dev, journal := 3, os.NewFile(4, "journal")
	delay, _ := time.ParseDuration(os.Getenv("FUSECONN_READ_DELAY"))
	lookupDelay, _ := time.ParseDuration(os.Getenv("FUSECONN_LOOKUP_DELAY"))
	fsys := newTestFS(os.Getenv("FUSECONN_HIDE"), delay, lookupDelay)
	o := Options{Journal: journal, UID: 0, GID: 0}
	var c *Conn
	var err error
	if os.Getenv("FUSECONN_RESUME") != "" {
		c, err = Resume(dev, fsys, testMountOptions(), o)
	} else {
		c, err = Serve(dev, fsys, testMountOptions(), o)
	}
	if c == nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "resume:", err)
	}
	r := c.Replayed()
	_, _ = fmt.Fprintf(os.Stdout, "serving nodes=%d staleNodes=%d took=%s\n", r.Nodes, r.StaleNodes, r.Took)
	hold := make(chan os.Signal, 1)
	signal.Notify(hold, syscall.SIGUSR1)
	go func() {
		for range hold {
			c.HoldWriteOpens()
			_, _ = os.Stdout.WriteString("holding\n")
		}
	}()
	sig := make(chan os.Signal, 1)
	signalNotify(sig)
	go func() {
		<-sig
		c.Stop()
	}()
	if err := c.Wait(); err != nil && !strings.Contains(err.Error(), "stopped") {
		fmt.Fprintln(os.Stderr, "wait:", err)
		return 1
	}
	return 0
}
