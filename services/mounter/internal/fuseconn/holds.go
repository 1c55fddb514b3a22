package fuseconn

import (
	"sync"
	"syscall"
)

// holds delays the requests that open a file for writing while a hand-over is prepared.
//
// Problem: a server handing its connection over waits until no file is open for writing, then
// stops; a CREATE or a write OPEN read between that check and the stop was answered by the
// stopping server, and its file failed with ESTALE under the next one, where the hand-over
// promised a pause.
// Solution: once the hand-over starts (HoldWriteOpens), such requests wait before they are
// served; the server stops only when no file is open for writing and none of those requests is
// being served (Opening). Stop leaves the held ones unanswered: the kernel resends them to the
// next server, which opens the file. ReleaseWriteOpens (the hand-over given up) lets them go.
// Invariant: after HoldWriteOpens, a request that opens a file for writing is either served
// before Opening and Writers count it, or never answered by this server.
type holds struct {
	mu       sync.Mutex
	holding  bool
	stopping bool
	release  chan struct{} // closed when the hold ends
	opening  int           // write opens being served
}

// opensForWriting reports whether req, of opcode op, opens a file for writing.
func opensForWriting(op uint32, req []byte) bool {
	switch op {
	case opCreate, opTmpfile:
		return true
	case opOpen:
		body := req[inHeaderSize:]
		if len(body) < 4 {
			return false
		}
		flags := le.Uint32(body)
		return flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
	}
	return false
}

// pass waits while write opens are held and reports whether the request may be served; false
// once the server stops.
func (h *holds) pass() bool {
	for {
		h.mu.Lock()
		switch {
		case h.stopping:
			h.mu.Unlock()
			return false
		case !h.holding:
			h.opening++
			h.mu.Unlock()
			return true
		}
		release := h.release
		h.mu.Unlock()
		<-release
	}
}

// served ends a write open that pass let through.
func (h *holds) served() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opening--
}

func (h *holds) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.holding && !h.stopping {
		h.holding, h.release = true, make(chan struct{})
	}
}

func (h *holds) end(stopping bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopping = h.stopping || stopping
	if h.holding {
		h.holding = false
		close(h.release)
	}
}

// resendMinor is the FUSE protocol minor version from which the kernel resends the requests a
// server read without answering (FUSE_NOTIFY_RESEND, Linux 6.9).
const resendMinor = 40

// HoldWriteOpens makes requests that open a file for writing wait (see holds) until
// ReleaseWriteOpens or Stop. On a kernel that cannot resend them to the next server it does
// nothing: a held open would wait until the connection is aborted.
func (c *Conn) HoldWriteOpens() {
	c.st.mu.Lock()
	in := c.st.initIn
	c.st.mu.Unlock()
	if len(in) < inHeaderSize+8 || le.Uint32(in[inHeaderSize+4:]) < resendMinor {
		return
	}
	c.holds.hold()
}

// ReleaseWriteOpens serves the write opens held since HoldWriteOpens.
func (c *Conn) ReleaseWriteOpens() { c.holds.end(false) }

// Opening is the number of requests opening a file for writing being served now.
func (c *Conn) Opening() int {
	c.holds.mu.Lock()
	defer c.holds.mu.Unlock()
	return c.holds.opening
}
