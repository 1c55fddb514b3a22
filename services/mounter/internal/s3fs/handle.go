package s3fs

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// handle is an open file: a reader, a writer, or a pending overwrite waiting for its O_TRUNC.
type handle struct {
	node *fileNode

	mu               sync.Mutex
	reader           *reader
	writer           *writer
	pendingOverwrite bool
	// opener is who opened a handle for writing (closer.go); nil for a read-only handle.
	opener *opener
	// cacheETag is the version this handle reads, counted in the node's pageCache while
	// cacheCounted.
	cacheETag    string
	cacheCounted bool
	// ino is the node id the handle's version is counted under (openVersions), with cacheCounted.
	ino uint64
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (h *handle) current() (*reader, *writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reader, h.writer
}

// beginOverwrite turns a pending overwrite into a writer of a new version of the object.
func (h *handle) beginOverwrite(context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writer != nil {
		return 0
	}
	n := h.node
	parent, name := h.parentOf()
	if parent == nil {
		return syscall.EPERM
	}
	n.mu.Lock()
	if n.writer != nil {
		n.mu.Unlock()
		return syscall.EPERM
	}
	n.writer = newWriter(n.fsys, n, parent, name)
	h.writer = n.writer
	if n.pending == h {
		n.pending = nil
	}
	n.mu.Unlock()
	parent.setLocal(name, n.EmbeddedInode())
	h.pendingOverwrite = false
	if h.reader != nil {
		h.reader.close()
		h.reader = nil
	}
	return 0
}

func (h *handle) parentOf() (*dirNode, string) {
	name, parent := h.node.Parent()
	if parent == nil {
		return nil, ""
	}
	d, _ := parent.Operations().(*dirNode)
	return d, name
}

// Read serves reads of an object; a handle writing a file cannot read.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	r, w := h.current()
	if w != nil || r == nil {
		return nil, syscall.EBADF
	}
	return r.read(ctx, dest, off)
}

// Write appends to a file being written; writes must be sequential.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	_, w := h.current()
	if w == nil {
		return 0, syscall.EPERM
	}
	h.opener.saw(h.node.fsys.callers.of(ctx))
	n, errno := w.write(ctx, data, off)
	if errno == 0 && h.node.fsys.opts.AbortOnSignal && ctx.Err() != nil {
		return 0, w.fail(errSignaled)
	}
	return n, errno
}

// Flush answers close(2): the opener's close completes the file, so the object is in the
// bucket when it returns 0, and a failed file fails every close (see writer.flush).
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	_, w := h.current()
	if w == nil {
		return 0
	}
	who := h.node.fsys.callers.of(ctx)
	h.opener.saw(who)
	opener := h.opener.closes(who)
	if opener && h.node.fsys.opts.AbortOnSignal && signaled(ctx) {
		_ = w.fail(errSignaled)
	}
	return w.flush(context.WithoutCancel(ctx), opener)
}

// errSignaled fails a file with --abort-on-signal whose writer got a signal.
var errSignaled = fmt.Errorf("the writer got a signal while writing or closing the file (--abort-on-signal): %w", syscall.EINTR)

// signalGrace is how long a close waits for the kernel's interrupt of it with
// --abort-on-signal.
const signalGrace = 10 * time.Millisecond

// signaled reports whether the request of ctx is interrupted within signalGrace.
//
// Problem: the kernel closes a killed process's descriptors as exit(2) does, so a writer
// SIGKILLed in the middle of a file closes it like a writer that is done, and the file would be
// stored cut short.
// Solution: a process that exits because of a signal still has the signal pending while its
// descriptors are closed, so the kernel interrupts the FLUSH it sends (FUSE_INTERRUPT); a
// process that exits normally has none. The interrupt follows the FLUSH at once: waiting briefly
// for it tells the two apart. A signal that only interrupts a close (Go's preemption signal
// does) fails the file as well, which is why this is an option.
func signaled(ctx context.Context) bool {
	t := time.NewTimer(signalGrace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true
	case <-t.C:
		return false
	}
}

// Fsync completes the upload; later writes fail.
func (h *handle) Fsync(ctx context.Context, _ uint32) syscall.Errno {
	_, w := h.current()
	if w == nil {
		return 0
	}
	return w.complete(ctx)
}

// Release completes an upload not completed yet and frees read buffers.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.node.mu.Lock()
	if h.node.pending == h {
		h.node.pending = nil
	}
	if h.cacheCounted {
		h.node.cache.closed(h.cacheETag)
		h.node.fsys.versions.closed(h.ino)
		h.cacheCounted = false
	}
	h.node.mu.Unlock()
	r, w := h.current()
	if r != nil {
		r.close()
	}
	if w != nil {
		return w.complete(ctx)
	}
	return 0
}
