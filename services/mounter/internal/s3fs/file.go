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

// fileNode is an object, or a new file being written.
type fileNode struct {
	fs.Inode
	fsys *filesystem
	key  string

	mu     sync.Mutex
	meta   entry
	writer *writer // non-nil while the file is being written
	// pending is the last handle opened for overwriting: the kernel truncates for O_TRUNC right
	// after the open, without naming the handle.
	pending *handle
	// overwriting is set while a pending overwrite turns into a writer (overwrite), so that no
	// reader opens in between.
	overwriting bool
	cache       pageCache
}

var (
	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
)

func (n *fileNode) refresh(e entry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.writer == nil {
		n.meta = e
	}
}

func (n *fileNode) snapshot() (entry, *writer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.meta, n.writer
}

// fillAttr writes the attributes of a dirNode or fileNode.
func fillAttr(ops fs.InodeEmbedder, a *fuse.Attr) {
	switch n := ops.(type) {
	case *dirNode:
		a.Mode = syscall.S_IFDIR | n.fsys.dirMode
		a.Nlink = 2
		a.Uid, a.Gid = n.fsys.uid, n.fsys.gid
	case *fileNode:
		size, mtime := n.attrs()
		a.Mode = syscall.S_IFREG | n.fsys.fileMode
		a.Nlink = 1
		a.Uid, a.Gid = n.fsys.uid, n.fsys.gid
		a.Size = uint64(size) //nolint:gosec // sizes are not negative
		a.Blocks = (a.Size + 511) / 512
		a.Blksize = 1 << 20
		a.SetTimes(&mtime, &mtime, &mtime)
	}
}

// attrs returns the size and modification time the kernel is told, and records the size as told:
// the bytes written while the file is written, else those of the version the kernel's page cache
// holds while a handle reads it (pageCache.attrs), else the object's.
func (n *fileNode) attrs() (int64, time.Time) {
	n.mu.Lock()
	e, w := n.cache.attrs(n.meta), n.writer
	n.mu.Unlock()
	size, mtime := e.size, e.mtime
	if w != nil {
		size, mtime = w.written(), w.mtime()
	}
	n.mu.Lock()
	n.cache.reported(size, time.Now(), n.fsys.ttl)
	n.mu.Unlock()
	return size, mtime
}

// Getattr reports size and modification time; a file being written reports the bytes written.
func (n *fileNode) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fillAttr(n, &out.Attr)
	return 0
}

// Setattr accepts only what a new file's writer needs: truncation to the bytes written (O_TRUNC
// arrives as a size-0 setattr on the just-opened handle, which turns it into an overwrite when
// --allow-overwrite is set) and times. Mode and owner changes fail with EPERM.
func (n *fileNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	if in.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID) != 0 {
		return syscall.EPERM
	}
	h, _ := f.(*handle)
	if h == nil {
		n.mu.Lock()
		h = n.pending
		n.mu.Unlock()
	}
	if size, ok := in.GetSize(); ok {
		if errno := n.truncate(ctx, h, size); errno != 0 {
			return errno
		}
	}
	if in.Valid&(fuse.FATTR_MTIME|fuse.FATTR_ATIME|fuse.FATTR_MTIME_NOW|fuse.FATTR_ATIME_NOW) != 0 {
		_, w := n.snapshot()
		if w == nil {
			return syscall.EPERM
		}
		mtime := time.Now()
		if t, ok := in.GetMTime(); ok {
			mtime = t
		}
		w.setMtime(mtime)
	}
	fillAttr(n, &out.Attr)
	return 0
}

func (n *fileNode) truncate(ctx context.Context, h *handle, size uint64) syscall.Errno {
	_, w := n.snapshot()
	switch {
	case w != nil && uint64(w.written()) == size: //nolint:gosec // sizes are not negative
		return 0
	case h != nil && h.pendingOverwrite && size == 0:
		return n.overwrite(ctx, h)
	case w != nil && h != nil && h.writer == w:
		// A writer's own truncation to another size (cp extending a sparse file) would store
		// a file of the wrong content: the file fails.
		return w.fail(fmt.Errorf("truncate %s to %d bytes while %d are written: %w", n.key, size, w.written(), syscall.EPERM))
	default:
		return syscall.EPERM
	}
}

// overwrite turns h, a pending overwrite, into a writer, unless another handle reads the file:
// the overwrite fails with EPERM, as in mount-s3, rather than the reader getting an error, bytes
// of the new version or an early end of file.
func (n *fileNode) overwrite(ctx context.Context, h *handle) syscall.Errno {
	n.mu.Lock()
	readers := n.cache.readers()
	if h.cacheCounted {
		readers-- // h itself, opened O_RDWR
	}
	if readers > 0 || n.overwriting {
		n.mu.Unlock()
		return syscall.EPERM
	}
	n.overwriting = true
	n.mu.Unlock()
	errno := h.beginOverwrite(ctx)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.overwriting = false
	if errno == 0 && h.cacheCounted && h.cacheETag != writingETag {
		// h reads no more: it no longer holds the old version's pages and attributes.
		n.cache.closed(h.cacheETag)
		h.cacheETag = writingETag
	}
	return errno
}

// Open opens a file for reading, or for overwriting when --allow-overwrite is set. The kernel
// strips O_TRUNC from the open and truncates through Setattr afterwards, so a write handle on an
// existing object starts as a pending overwrite that only that truncation turns into a writer.
func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	acc := flags & syscall.O_ACCMODE
	if _, w := n.snapshot(); w != nil && !w.settle() {
		// One writer at a time, and no reading before the upload is complete.
		return nil, 0, syscall.EPERM
	}
	write := acc == syscall.O_WRONLY || acc == syscall.O_RDWR
	if write && n.fsys.opts.ReadOnly {
		return nil, 0, syscall.EROFS
	}
	if write && (!n.fsys.opts.AllowOverwrite || flags&syscall.O_APPEND != 0) {
		if acc == syscall.O_WRONLY {
			return nil, 0, syscall.EPERM
		}
		write = false // O_RDWR without overwrite: a read-only handle
	}
	if write && syncRefused(flags) {
		return nil, 0, syscall.EINVAL
	}
	e, errno := n.fsys.headFile(ctx, n.key)
	if errno != 0 {
		return nil, 0, errno
	}
	n.refresh(e)
	h := &handle{node: n}
	var openFlags uint32
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.writer != nil || n.overwriting:
		return nil, 0, syscall.EPERM // a writer started since the check above
	case acc == syscall.O_WRONLY && write && n.cache.readers() > 0:
		return nil, 0, syscall.EPERM // an overwrite of a file being read (see overwrite)
	}
	if acc != syscall.O_WRONLY {
		h.reader = newReader(n.fsys, n.key, e)
		h.cacheETag, h.cacheCounted = e.etag, true
		h.ino = n.StableAttr().Ino // the node id the kernel uses (fs.Options.ExternalNodeID)
		n.fsys.versions.opened(h.ino, e.etag)
		openFlags = n.cache.opened(e, replayed(ctx), time.Now())
	}
	if write {
		h.pendingOverwrite = true
		h.opener = newOpener(ctx)
		openFlags |= fuse.FOPEN_DIRECT_IO // as in Create: WRITE names the writer's descriptor table
		n.pending = h
	}
	return h, openFlags, 0
}

// syncRefused reports whether an open for writing asks for synchronous writes (O_SYNC includes
// O_DSYNC on Linux), which is refused with EINVAL as in mount-s3: the kernel sends an fsync
// after every write, and fsync completes the upload, so the file would end after its first write.
func syncRefused(flags uint32) bool {
	return flags&syscall.O_DSYNC != 0
}

// replayed reports whether a request comes from fuseconn's resume rather than the kernel: the
// requests it replays carry no caller pid, and every OPEN from the kernel has one.
func replayed(ctx context.Context) bool {
	c, ok := ctx.(*fuse.Context)
	return ok && c.Pid == 0
}

// startWrite makes the node a new file being written by a fresh handle, opened by ctx's caller.
func (n *fileNode) startWrite(ctx context.Context, parent *dirNode, name string) (*handle, syscall.Errno) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.writer != nil {
		return nil, syscall.EPERM
	}
	n.writer = newWriter(n.fsys, n, parent, name)
	return &handle{node: n, writer: n.writer, opener: newOpener(ctx)}, 0
}

// finishWrite records the uploaded object, or forgets the failed file.
func (n *fileNode) finishWrite(w *writer, e entry, ok bool) {
	n.mu.Lock()
	if n.writer == w {
		n.writer = nil
		if ok {
			n.meta = e
			n.cache.reported(e.size, time.Now(), n.fsys.ttl) // the kernel saw the writes
		}
	}
	n.mu.Unlock()
	if w.parent.localChild(w.name) == n.EmbeddedInode() {
		w.parent.setLocal(w.name, nil)
	}
	if ok {
		n.fsys.meta.put(n.key, e)
	} else {
		n.fsys.meta.forget(n.key)
	}
}
