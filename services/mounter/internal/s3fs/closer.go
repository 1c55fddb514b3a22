package s3fs

import (
	"context"
	"slices"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Who closes a file being written.
//
// Problem: the kernel sends a FLUSH for every close(2) of a descriptor, from whichever process
// closes it, and a process that inherited the descriptor (a shell's child writing to a
// redirection) closes it when it exits. Completing the upload at every close ends the file at
// the first child's exit: `sh -c 'echo a; /bin/echo b; echo c' > f` stored "a b" and the last
// write failed. The release that follows the last close reaches no one: close(2) has returned.
// Solution: as mount-s3 does, only the opener's close completes the upload; any other close only
// reports an earlier failure, and the release completes a file no opener's close completed. The
// opener is the thread that opened the file (the pid the kernel names in OPEN or CREATE) and
// every thread sharing its descriptor table: the kernel names a table in FLUSH and, for a handle
// opened with FOPEN_DIRECT_IO, in WRITE (the FUSE lock owner), so a table seen in a
// request of the opening thread is the opener's. A close whose table was never seen while none
// of the opener's is known is ambiguous (a thread of the opener that never wrote on the opening
// thread, as a Go program does): it completes, as before.
// Invariant: a close from a process whose descriptor table is known not to be the opener's never
// completes the upload; the kernel gives pid 0 for a process outside the mounter's pid
// namespace, and a mount whose opens carry pid 0 completes at every close (the node-agent runs
// in the host's pid namespace so that this does not happen under kubelet).

// caller is who sent a request: the thread id, and the FUSE lock owner (a key of its descriptor
// table) when the request carries one.
type caller struct {
	pid      uint32
	owner    uint64
	hasOwner bool
}

// callers records the callers of the requests in flight that name a lock owner, by the request's
// cancel channel, which go-fuse hands to the node's method as its context's Done channel.
type callers struct {
	mu sync.Mutex
	m  map[<-chan struct{}]caller
}

func (c *callers) record(cancel <-chan struct{}, who caller) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[<-chan struct{}]caller{}
	}
	c.m[cancel] = who
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.m, cancel)
	}
}

// of returns the caller of the request whose method got ctx.
func (c *callers) of(ctx context.Context) caller {
	fc, ok := ctx.(*fuse.Context)
	if !ok {
		return caller{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if who, ok := c.m[fc.Cancel]; ok {
		return who
	}
	return caller{pid: fc.Pid}
}

// recordOwners wraps the node file system: it records the lock owner of every WRITE and FLUSH
// for the node's methods (callers.of).
func recordOwners(fsys fuse.RawFileSystem, c *callers) fuse.RawFileSystem {
	return &ownerRecorder{RawFileSystem: fsys, c: c}
}

type ownerRecorder struct {
	fuse.RawFileSystem
	c *callers
}

func (r *ownerRecorder) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer r.c.record(cancel, writeCaller(in))()
	return r.RawFileSystem.Write(cancel, in, data)
}

func (r *ownerRecorder) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer r.c.record(cancel, writeCaller(in))()
	return r.RawFileSystem.Writev(cancel, in, data)
}

func (r *ownerRecorder) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer r.c.record(cancel, caller{pid: in.Pid, owner: in.LockOwner, hasOwner: true})()
	return r.RawFileSystem.Flush(cancel, in)
}

func writeCaller(in *fuse.WriteIn) caller {
	who := caller{pid: in.Pid}
	if in.WriteFlags&fuse.WRITE_LOCKOWNER != 0 {
		who.owner, who.hasOwner = in.LockOwner, true
	}
	return who
}

// opener is the thread that opened a file for writing and the descriptor tables seen in its
// requests.
type opener struct {
	mu     sync.Mutex
	pid    uint32
	owners []uint64
}

func newOpener(ctx context.Context) *opener {
	o := &opener{}
	if fc, ok := ctx.(*fuse.Context); ok {
		o.pid = fc.Pid
	}
	return o
}

// saw learns from a request of the file's handle: a table named by the opening thread is the
// opener's.
func (o *opener) saw(who caller) {
	if o == nil || !who.hasOwner || who.pid == 0 || who.pid != o.pid {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !slices.Contains(o.owners, who.owner) {
		o.owners = append(o.owners, who.owner)
	}
}

// closes reports whether a close by who is the opener's (or ambiguous) and completes the file.
func (o *opener) closes(who caller) bool {
	if o == nil || o.pid == 0 || who.pid == o.pid {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !who.hasOwner {
		return len(o.owners) == 0
	}
	return len(o.owners) == 0 || slices.Contains(o.owners, who.owner)
}
