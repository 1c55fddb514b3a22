package s3fs

import (
	"context"
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
	cache   pageCache
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
		e, w := n.snapshot()
		size, mtime := e.size, e.mtime
		if w != nil {
			size, mtime = w.written(), w.mtime()
		}
		a.Mode = syscall.S_IFREG | n.fsys.fileMode
		a.Nlink = 1
		a.Uid, a.Gid = n.fsys.uid, n.fsys.gid
		a.Size = uint64(size) //nolint:gosec // sizes are not negative
		a.Blocks = (a.Size + 511) / 512
		a.Blksize = 1 << 20
		a.SetTimes(&mtime, &mtime, &mtime)
	}
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
		return h.beginOverwrite(ctx)
	default:
		return syscall.EPERM
	}
}

// Open opens a file for reading, or for overwriting when --allow-overwrite is set. The kernel
// strips O_TRUNC from the open and truncates through Setattr afterwards, so a write handle on an
// existing object starts as a pending overwrite that only that truncation turns into a writer.
func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	acc := flags & syscall.O_ACCMODE
	_, w := n.snapshot()
	if w != nil {
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
	e, errno := n.fsys.headFile(ctx, n.key)
	if errno != 0 {
		return nil, 0, errno
	}
	n.refresh(e)
	h := &handle{node: n}
	var openFlags uint32
	if acc != syscall.O_WRONLY {
		h.reader = newReader(n.fsys, n.key, e)
		h.cacheETag, h.cacheCounted = e.etag, true
		h.ino = n.StableAttr().Ino // the node id the kernel uses (fs.Options.ExternalNodeID)
		n.fsys.versions.opened(h.ino, e.etag)
		n.mu.Lock()
		if n.cache.opened(e.etag, replayed(ctx)) {
			openFlags = fuse.FOPEN_KEEP_CACHE
		}
		n.mu.Unlock()
	}
	if write {
		h.pendingOverwrite = true
		n.mu.Lock()
		n.pending = h
		n.mu.Unlock()
	}
	return h, openFlags, 0
}

// replayed reports whether a request comes from fuseconn's resume rather than the kernel: the
// requests it replays carry no caller pid, and every OPEN from the kernel has one.
func replayed(ctx context.Context) bool {
	c, ok := ctx.(*fuse.Context)
	return ok && c.Pid == 0
}

// startWrite makes the node a new file being written by a fresh handle.
func (n *fileNode) startWrite(parent *dirNode, name string) (*handle, syscall.Errno) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.writer != nil {
		return nil, syscall.EPERM
	}
	n.writer = newWriter(n.fsys, n, parent, name)
	return &handle{node: n, writer: n.writer}, 0
}

// finishWrite records the uploaded object, or forgets the failed file.
func (n *fileNode) finishWrite(w *writer, e entry, ok bool) {
	n.mu.Lock()
	if n.writer == w {
		n.writer = nil
		if ok {
			n.meta = e
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
