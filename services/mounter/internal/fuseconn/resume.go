package fuseconn

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Resume takes over fd, a FUSE connection whose previous server stopped (Stop) or died, from the
// journal that server kept (Options.Journal), and serves it in the background like Serve.
//
// It replays into fsys what the kernel holds: the INIT (the reply must match the one the kernel
// received, or the two servers disagree on the protocol and Resume fails), a LOOKUP for each node
// id (parents first), and an OPEN for each file handle, in handle order so that fsys numbers each
// one as the kernel does. A node or handle it cannot restore (the object is gone or changed kind,
// a file being written, a directory made with mkdir that S3 does not hold) becomes stale: every
// request on it fails with ESTALE until the kernel forgets or releases it, and nothing else is
// affected. Then it asks the kernel to resend the requests the previous server had read but not
// answered; on a kernel that cannot, the error wraps ErrResendUnsupported and the Conn serves.
func Resume(fd int, fsys fuse.RawFileSystem, mo *fuse.MountOptions, o Options) (*Conn, error) {
	if o.Journal == nil {
		return nil, errors.New("resume FUSE: no journal")
	}
	recs, j, err := readJournal(o.Journal)
	if err != nil {
		return nil, fmt.Errorf("resume FUSE: %w", err)
	}
	saved := newState()
	for _, r := range recs {
		if err := saved.apply(r); err != nil {
			return nil, fmt.Errorf("resume FUSE: %w", err)
		}
	}
	if saved.initIn == nil {
		return nil, fmt.Errorf("resume FUSE: %w", ErrNoJournal)
	}
	c, err := newConn(fd, fsys, mo, o)
	if err != nil {
		return nil, err
	}
	if err := c.replay(saved); err != nil {
		c.close()
		return nil, fmt.Errorf("resume FUSE: %w", err)
	}
	c.st.j = j
	if err := j.checkpoint(c.st.snapshot()); err != nil {
		c.close()
		return nil, fmt.Errorf("resume FUSE: %w", err)
	}
	var resendErr error
	if err := c.write(notification(notifyResend)); err != nil {
		resendErr = fmt.Errorf("resume FUSE: %w (%w)", ErrResendUnsupported, err)
	}
	go c.loop()
	return c, resendErr
}

// Replayed is what a Resume restored of what the kernel holds.
type Replayed struct {
	// Nodes and StaleNodes count the node ids looked up again and those that could not be.
	Nodes, StaleNodes int
	// Handles and StaleHandles count the file handles opened again and those that could not be.
	Handles, StaleHandles int
	// Took is the time the replay took, the INIT's included.
	Took time.Duration
}

// Replayed returns what Resume restored; zero for a Conn that Serve started.
func (c *Conn) Replayed() Replayed { return c.replayed }

// replay rebuilds saved in the filesystem and in c's state.
func (c *Conn) replay(saved *state) error {
	start := time.Now()
	out := c.call(saved.initIn)
	if !bytes.Equal(out, saved.initOut) {
		return errors.New("the new server answers the kernel's INIT differently from the old one; remount instead")
	}
	c.st.initIn, c.st.initOut = saved.initIn, saved.initOut
	c.replayNodes(saved.nodes)
	if err := c.replayHandles(saved.files); err != nil {
		return err
	}
	r := Replayed{Took: time.Since(start)}
	for _, n := range c.st.nodes {
		r.Nodes++
		if n.stale {
			r.StaleNodes++
		}
	}
	for _, f := range c.st.files {
		r.Handles++
		if f.stale {
			r.StaleHandles++
		}
	}
	c.replayed = r
	c.log.Info("Replayed what the kernel holds of the FUSE connection", "nodes", r.Nodes, "staleNodes", r.StaleNodes,
		"handles", r.Handles, "staleHandles", r.StaleHandles, "took", r.Took.String())
	return nil
}

// replayLookups bounds the lookups a replay has in flight.
//
// Problem: a workload that walked a large bucket leaves the kernel holding tens of thousands of
// node ids, each restored by a lookup that costs the filesystem an S3 round trip: one at a time,
// 50,000 ids at 5 ms each took over four minutes, past the time a resume may take, and every
// workload of the volume then got ENOTCONN.
// Solution: the lookups of one level of the tree (the children of nodes already restored) run
// side by side, at most replayLookups at once: as many as the kernel itself keeps in flight
// (max_background). Node ids are derived from keys, so the order of the
// lookups does not change the ids they find.
// Invariant: a child is looked up only after its parent was restored.
const replayLookups = 64

// replayNodes looks every node up again, parents before children; a node whose lookup fails or
// finds another node id is stale, and so are its descendants. Each node is visited once, from the
// root: a journal whose parents form a cycle (a hostile one, or a node that is its own ancestor)
// would otherwise be walked for ever.
func (c *Conn) replayNodes(nodes map[uint64]*node) {
	children := map[uint64][]uint64{}
	for id, n := range nodes {
		children[n.parent] = append(children[n.parent], id)
	}
	level := []uint64{rootID}
	seen := map[uint64]bool{rootID: true}
	for len(level) > 0 {
		var next []uint64
		for _, parent := range level {
			for _, id := range children[parent] {
				if !seen[id] {
					seen[id] = true
					next = append(next, id)
				}
			}
		}
		restored := make([]bool, len(next))
		var wg sync.WaitGroup
		slots := make(chan struct{}, replayLookups)
		for i, id := range next {
			n := nodes[id]
			if n.stale || (n.parent != rootID && c.st.nodes[n.parent].stale) {
				continue
			}
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				restored[i] = c.lookupAgain(n.parent, id, n.name)
			})
		}
		wg.Wait()
		for i, id := range next {
			n := nodes[id]
			var server uint64
			if restored[i] {
				server = 1
			}
			c.st.nodes[id] = &node{gen: n.gen, parent: n.parent, name: n.name, kernel: n.kernel, server: server, stale: !restored[i]}
		}
		level = next
	}
	for id, n := range nodes {
		if !seen[id] { // no path from the root: created by an operation s3fs does not support
			c.st.nodes[id] = &node{gen: n.gen, parent: n.parent, name: n.name, kernel: n.kernel, stale: true}
		}
	}
}

// lookupAgain looks name up in parent and reports whether it is node id. replayNodes calls it
// from many goroutines at once, as serve passes the kernel's requests: call allocates its own
// reply, and the protocol server locks what its requests share.
func (c *Conn) lookupAgain(parent, id uint64, name string) bool {
	if name == "" {
		return false
	}
	reply := c.call(request(opLookup, syntheticUnique(), parent, c.opts.UID, c.opts.GID, append([]byte(name), 0)))
	if replyError(reply) != 0 || len(reply) < outHeaderSize+entryOutSize {
		return false
	}
	got := le.Uint64(reply[outHeaderSize:])
	if got == id {
		return true
	}
	if got != 0 {
		c.call(request(opForget, syntheticUnique(), got, 0, 0, le.AppendUint64(nil, 1)))
	}
	return false
}

// maxHandle bounds the file handle numbers a journal may name: the filesystem numbers handles
// with the lowest free number first, so a number over a million means a million open files.
const maxHandle = 1 << 20

// replayHandles opens every handle again in handle order. The filesystem numbers handles with the
// lowest free number first, so each gap and each handle that cannot be restored is filled with a
// placeholder (the root directory, opened): the gaps' are released at the end, a stale handle's
// when the kernel releases it.
func (c *Conn) replayHandles(files map[uint64]*handle) error {
	fhs := make([]uint64, 0, len(files))
	for fh := range files {
		fhs = append(fhs, fh)
	}
	sort.Slice(fhs, func(a, b int) bool { return fhs[a] < fhs[b] })
	if len(fhs) > 0 && fhs[len(fhs)-1] > maxHandle {
		// Gaps are filled one placeholder at a time: a journal naming handle 2^40 made the
		// resuming server loop until it ran out of memory.
		return fmt.Errorf("the journal names file handle %d, more than the %d a connection has open", fhs[len(fhs)-1], maxHandle)
	}
	var gaps []uint64
	next := uint64(1)
	for _, fh := range fhs {
		for ; next < fh; next++ {
			if err := c.placeholder(next); err != nil {
				return err
			}
			gaps = append(gaps, next)
		}
		next = fh + 1
		f := files[fh]
		if c.openAgain(fh, f) {
			c.st.files[fh] = &handle{node: f.node, flags: f.flags, dir: f.dir, version: f.version}
			continue
		}
		if err := c.placeholder(fh); err != nil {
			return err
		}
		c.st.files[fh] = &handle{node: f.node, flags: f.flags, dir: f.dir, stale: true, version: f.version}
	}
	for _, fh := range gaps {
		c.call(request(opReleasedir, syntheticUnique(), rootID, 0, 0, releaseIn(fh)))
	}
	return nil
}

// openAgain opens the node of a handle as it was opened, if it can be restored: read handles and
// directories can, a file being written cannot (its upload lived in the dead server). Like every
// request the resume makes up, it carries no caller pid: the filesystem can tell it from the
// kernel's, whose answer the kernel acts on.
func (c *Conn) openAgain(fh uint64, f *handle) bool {
	if n := c.st.nodes[f.node]; f.node != rootID && (n == nil || n.stale) {
		return false
	}
	op := uint32(opOpen)
	flags := f.flags &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC)
	switch {
	case f.dir:
		op = opOpendir
	case f.flags&syscall.O_ACCMODE != syscall.O_RDONLY:
		return false
	}
	in := le.AppendUint32(le.AppendUint32(nil, flags), 0) // flags, open_flags
	reply := c.call(request(op, syntheticUnique(), f.node, c.opts.UID, c.opts.GID, in))
	if replyError(reply) != 0 || len(reply) < outHeaderSize+openOutSize {
		return false
	}
	if got := le.Uint64(reply[outHeaderSize:]); got != fh {
		c.call(request(opRelease, syntheticUnique(), f.node, 0, 0, releaseIn(got)))
		return false
	}
	if f.version != nil && c.opts.Version != nil && !bytes.Equal(c.opts.Version(f.node), f.version) {
		// The object was replaced meanwhile: reading on would mix two versions.
		c.call(request(opRelease, syntheticUnique(), f.node, 0, 0, releaseIn(fh)))
		return false
	}
	return true
}

// placeholder opens the root directory as handle fh.
func (c *Conn) placeholder(fh uint64) error {
	in := le.AppendUint32(le.AppendUint32(nil, syscall.O_RDONLY), 0)
	reply := c.call(request(opOpendir, syntheticUnique(), rootID, c.opts.UID, c.opts.GID, in))
	if replyError(reply) != 0 || len(reply) < outHeaderSize+openOutSize {
		return fmt.Errorf("open a placeholder for file handle %d: %w", fh, replyError(reply))
	}
	if got := le.Uint64(reply[outHeaderSize:]); got != fh {
		return fmt.Errorf("the filesystem numbered file handle %d as %d; remount instead", fh, got)
	}
	return nil
}

// notification is a FUSE notification without a body.
func notification(code int32) []byte {
	b := make([]byte, outHeaderSize)
	le.PutUint32(b, outHeaderSize)
	le.PutUint32(b[4:], uint32(code)) //nolint:gosec // notification codes are small
	return b
}
