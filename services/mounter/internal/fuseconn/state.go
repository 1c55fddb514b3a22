package fuseconn

import (
	"fmt"
	"sort"
	"sync"
	"syscall"
)

// node is a node id the kernel holds lookups of.
type node struct {
	gen, parent uint64
	name        string
	kernel      uint64 // lookups the kernel holds: FORGETs will return this many
	server      uint64 // lookups the filesystem holds: what it must be told to forget
	stale       bool   // not restored after a resume: every request on it fails with ESTALE
}

// handle is a file handle the kernel holds.
type handle struct {
	node  uint64
	flags uint32
	dir   bool
	stale bool // not restored after a resume: requests on it fail with ESTALE until released
	// version is what the filesystem said the handle reads when it was opened (Options.Version),
	// nil when it said nothing.
	version []byte
}

// state is what the kernel holds of the connection, seen from its requests and our replies. It is
// the authority on lookup counts: FORGETs reach the filesystem only once the kernel's count is
// zero, with the filesystem's own count, so that a resumed filesystem that holds one lookup per
// restored node stays consistent with a kernel that holds many.
type state struct {
	mu      sync.Mutex
	nodes   map[uint64]*node
	files   map[uint64]*handle
	initIn  []byte
	initOut []byte
	j       *journal // nil without a journal
	// forward delivers a synthetic request to the filesystem, ignoring its reply.
	forward func(req []byte)
	// version is Options.Version, or nil.
	version func(nodeID uint64) []byte
}

func newState() *state {
	return &state{nodes: map[uint64]*node{}, files: map[uint64]*handle{}}
}

const rootID = 1

// verdict is what admit decides for a request.
type verdict struct {
	reply bool          // answer with errno instead of passing the request on
	errno syscall.Errno // 0 with reply: answer success
}

var pass = verdict{}

// admit decides whether a request may reach the filesystem: requests on a node or handle the
// filesystem does not hold (a stale one after a resume, or one it never handed out) must not,
// since go-fuse's bridge panics on them.
func (s *state) admit(h header, req []byte) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fh, ok := fileHandle(h.opcode, req); ok && fh != 0 {
		f := s.files[fh]
		release := h.opcode == opRelease || h.opcode == opReleasedir
		switch {
		case f == nil && release:
			// A RELEASE resent after a crash whose server had already recorded it.
			return verdict{reply: true}
		case f == nil:
			return verdict{reply: true, errno: syscall.EBADF}
		case f.stale && release:
			// The filesystem holds a placeholder under this number: free it now.
			delete(s.files, fh)
			s.record(releaseRec(fh))
			s.forward(request(opReleasedir, syntheticUnique(), rootID, 0, 0, releaseIn(fh)))
			return verdict{reply: true}
		case f.stale:
			return verdict{reply: true, errno: syscall.ESTALE}
		case release:
			// Forgotten before the filesystem frees the number: a CREATE or OPEN served meanwhile
			// may get the same number, and its record must not be deleted by this release's.
			delete(s.files, fh)
			s.record(releaseRec(fh))
		}
	}
	if h.nodeID == 0 || h.nodeID == rootID {
		return pass
	}
	n := s.nodes[h.nodeID]
	switch {
	case n == nil:
		return verdict{reply: true, errno: syscall.ESTALE}
	case n.stale:
		if h.opcode == opRelease || h.opcode == opReleasedir {
			return verdict{reply: true}
		}
		return verdict{reply: true, errno: syscall.ESTALE}
	}
	return pass
}

// observe records what a reply, about to be written, gives the kernel or takes from it.
func (s *state) observe(h header, req, reply []byte) {
	if replyError(reply) != 0 {
		return
	}
	body := reply[outHeaderSize:]
	s.mu.Lock()
	defer s.mu.Unlock()
	if name, ok := entryName(h.opcode, req); ok && len(body) >= entryOutSize {
		id, gen := le.Uint64(body), le.Uint64(body[8:])
		if id != 0 {
			parent := h.nodeID
			if name == "" {
				parent = 0 // a node no lookup can find again
			}
			s.lookup(id, gen, parent, name, 1, 1, false)
		}
		if h.opcode == opCreate && len(body) >= entryOutSize+openOutSize && len(req) >= inHeaderSize+4 {
			s.open(le.Uint64(body[entryOutSize:]), id, le.Uint32(req[inHeaderSize:]), false, false, nil)
		}
		return
	}
	switch h.opcode {
	case opOpen, opOpendir:
		if len(body) >= openOutSize && len(req) >= inHeaderSize+4 {
			flags, dir := le.Uint32(req[inHeaderSize:]), h.opcode == opOpendir
			var version []byte
			if s.version != nil && !dir && flags&syscall.O_ACCMODE == syscall.O_RDONLY {
				version = s.version(h.nodeID)
			}
			s.open(le.Uint64(body), h.nodeID, flags, dir, false, version)
		}
	}
}

func (s *state) lookup(id, gen, parent uint64, name string, kernel, server uint64, stale bool) {
	n := s.nodes[id]
	if n == nil {
		n = &node{}
		s.nodes[id] = n
	}
	n.gen, n.parent, n.name, n.stale = gen, parent, name, stale
	n.kernel += kernel
	n.server += server
	s.record(nodeRec(id, n, kernel))
}

func (s *state) open(fh, nodeID uint64, flags uint32, dir, stale bool, version []byte) {
	f := &handle{node: nodeID, flags: flags, dir: dir, stale: stale, version: version}
	s.files[fh] = f
	s.record(openRec(fh, f))
}

// forget applies a FORGET or BATCH_FORGET from the kernel.
func (s *state) forget(h header, req []byte) {
	body := req[inHeaderSize:]
	s.mu.Lock()
	defer s.mu.Unlock()
	switch h.opcode {
	case opForget:
		if len(body) >= 8 {
			s.forgetOne(h.nodeID, le.Uint64(body))
		}
	case opBatchForget:
		if len(body) < 8 {
			return
		}
		count := int(le.Uint32(body))
		for i := range count {
			e := body[8+16*i:]
			if len(e) < 16 {
				return
			}
			s.forgetOne(le.Uint64(e), le.Uint64(e[8:]))
		}
	}
}

func (s *state) forgetOne(id, nlookup uint64) {
	n := s.nodes[id]
	if n == nil {
		return
	}
	s.record(forgetRec(id, nlookup))
	if nlookup < n.kernel {
		n.kernel -= nlookup
		return
	}
	delete(s.nodes, id)
	if n.server > 0 {
		s.forward(request(opForget, syntheticUnique(), id, 0, 0, le.AppendUint64(nil, n.server)))
	}
}

// record appends to the journal; a failure is kept in the journal and reported by Conn.Err.
func (s *state) record(rec []byte) {
	if s.j == nil {
		return
	}
	if s.j.append(rec) != nil {
		return
	}
	// Compact once the log is far larger than the state it describes.
	live := int64(len(s.initIn)+len(s.initOut)) + 64*int64(len(s.nodes)+len(s.files))
	if s.j.size() > minCompaction && s.j.size() > 8*live {
		_ = s.j.checkpoint(s.snapshot())
	}
}

// snapshot is the state as journal records.
func (s *state) snapshot() [][]byte {
	recs := [][]byte{append([]byte{recInit}, s.initIn...), append([]byte{recInitReply}, s.initOut...)}
	ids := make([]uint64, 0, len(s.nodes))
	for id := range s.nodes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	for _, id := range ids {
		recs = append(recs, nodeRec(id, s.nodes[id], s.nodes[id].kernel))
	}
	fhs := make([]uint64, 0, len(s.files))
	for fh := range s.files {
		fhs = append(fhs, fh)
	}
	sort.Slice(fhs, func(a, b int) bool { return fhs[a] < fhs[b] })
	for _, fh := range fhs {
		recs = append(recs, openRec(fh, s.files[fh]))
	}
	return recs
}

func nodeRec(id uint64, n *node, added uint64) []byte {
	b := []byte{recNode}
	b = le.AppendUint64(b, id)
	b = le.AppendUint64(b, n.gen)
	b = le.AppendUint64(b, n.parent)
	b = le.AppendUint64(b, added)
	b = append(b, boolByte(n.stale))
	return append(b, n.name...)
}

func forgetRec(id, nlookup uint64) []byte {
	return le.AppendUint64(le.AppendUint64([]byte{recForget}, id), nlookup)
}

func openRec(fh uint64, f *handle) []byte {
	b := le.AppendUint64([]byte{recOpen}, fh)
	b = le.AppendUint64(b, f.node)
	b = le.AppendUint32(b, f.flags)
	b = append(b, boolByte(f.dir), boolByte(f.stale))
	return append(b, f.version...)
}

func releaseRec(fh uint64) []byte { return le.AppendUint64([]byte{recRelease}, fh) }

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// apply replays one journal record into s (without journaling it again).
func (s *state) apply(rec []byte) error {
	p := rec[1:]
	short := fmt.Errorf("journal record %q of %d bytes is short", rec[0], len(rec))
	switch rec[0] {
	case recCheckpoint:
		s.nodes, s.files, s.initIn, s.initOut = map[uint64]*node{}, map[uint64]*handle{}, nil, nil
	case recInit:
		s.initIn = append([]byte(nil), p...)
	case recInitReply:
		s.initOut = append([]byte(nil), p...)
	case recNode:
		if len(p) < 33 {
			return short
		}
		id := le.Uint64(p)
		n := s.nodes[id]
		if n == nil {
			n = &node{}
			s.nodes[id] = n
		}
		n.gen, n.parent, n.stale, n.name = le.Uint64(p[8:]), le.Uint64(p[16:]), p[32] == 1, string(p[33:])
		n.kernel += le.Uint64(p[24:])
	case recForget:
		if len(p) < 16 {
			return short
		}
		id, nlookup := le.Uint64(p), le.Uint64(p[8:])
		if n := s.nodes[id]; n != nil {
			if nlookup < n.kernel {
				n.kernel -= nlookup
			} else {
				delete(s.nodes, id)
			}
		}
	case recOpen:
		if len(p) < 22 {
			return short
		}
		f := &handle{node: le.Uint64(p[8:]), flags: le.Uint32(p[16:]), dir: p[20] == 1, stale: p[21] == 1}
		if len(p) > 22 {
			f.version = append([]byte(nil), p[22:]...)
		}
		s.files[le.Uint64(p)] = f
	case recRelease:
		if len(p) < 8 {
			return short
		}
		delete(s.files, le.Uint64(p))
	default:
		return fmt.Errorf("unknown journal record %q", rec[0])
	}
	return nil
}
