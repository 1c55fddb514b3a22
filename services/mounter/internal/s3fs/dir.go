package s3fs

import (
	"context"
	"strings"
	"sync"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirNode is a directory: a common prefix in the bucket, or a local directory made by mkdir that
// exists only in this mount until a file is written below it.
type dirNode struct {
	fs.Inode
	fsys   *filesystem
	prefix string // "" for the bucket root, else ends in "/"

	mu sync.Mutex
	// local holds children that S3 does not list yet: mkdir'd directories and files being written.
	local map[string]*fs.Inode
}

var (
	_ fs.NodeLookuper   = (*dirNode)(nil)
	_ fs.NodeReaddirer  = (*dirNode)(nil)
	_ fs.NodeGetattrer  = (*dirNode)(nil)
	_ fs.NodeSetattrer  = (*dirNode)(nil)
	_ fs.NodeMkdirer    = (*dirNode)(nil)
	_ fs.NodeRmdirer    = (*dirNode)(nil)
	_ fs.NodeUnlinker   = (*dirNode)(nil)
	_ fs.NodeCreater    = (*dirNode)(nil)
	_ fs.NodeRenamer    = (*dirNode)(nil)
	_ fs.NodeSymlinker  = (*dirNode)(nil)
	_ fs.NodeLinker     = (*dirNode)(nil)
	_ fs.NodeMknoder    = (*dirNode)(nil)
	_ fs.NodeStatfser   = (*dirNode)(nil)
	_ fs.NodeSetxattrer = (*dirNode)(nil)
)

// validName reports whether an S3 key component can be a file name; others are hidden.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

func (d *dirNode) localChild(name string) *fs.Inode {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.local[name]
}

func (d *dirNode) setLocal(name string, ino *fs.Inode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ino == nil {
		delete(d.local, name)
		return
	}
	d.local[name] = ino
}

// localEntries snapshots the local children for readdir.
func (d *dirNode) localEntries() []fuse.DirEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]fuse.DirEntry, 0, len(d.local))
	for name, ino := range d.local {
		out = append(out, fuse.DirEntry{Name: name, Mode: ino.Mode(), Ino: ino.StableAttr().Ino})
	}
	return out
}

// Lookup resolves name: local children first, then the metadata cache, then S3.
func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if ino := d.localChild(name); ino != nil {
		fillAttr(ino.Operations(), &out.Attr)
		return ino, 0
	}
	if !validName(name) {
		return nil, syscall.ENOENT
	}
	e, errno := d.fsys.stat(ctx, d.prefix+name)
	if errno != 0 {
		return nil, errno
	}
	ino := d.childInode(ctx, name, e)
	fillAttr(ino.Operations(), &out.Attr)
	return ino, 0
}

// childInode returns the inode for a remote child. go-fuse returns the existing inode when one
// with the same number exists, so the metadata is written into whichever node it returns.
func (d *dirNode) childInode(ctx context.Context, name string, e entry) *fs.Inode {
	key := d.prefix + name
	if e.isDir {
		node := &dirNode{fsys: d.fsys, prefix: key + "/", local: map[string]*fs.Inode{}}
		return d.NewInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: inoOf(key + "/")})
	}
	node := &fileNode{fsys: d.fsys, key: key, meta: e}
	ino := d.NewInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFREG, Ino: inoOf(key)})
	if existing, ok := ino.Operations().(*fileNode); ok && existing != node {
		existing.refresh(e)
	}
	return ino
}

// Getattr reports the directory's fixed owner and mode.
func (d *dirNode) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fillAttr(d, &out.Attr)
	return 0
}

// Setattr refuses every change: directories have no metadata in S3.
func (d *dirNode) Setattr(context.Context, fs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	if d.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	return syscall.EPERM
}

// Mkdir makes a local directory; S3 is not changed until a file is written inside it.
func (d *dirNode) Mkdir(ctx context.Context, name string, _ uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if d.fsys.opts.ReadOnly {
		return nil, syscall.EROFS
	}
	if errno := d.checkAbsent(ctx, name); errno != 0 {
		return nil, errno
	}
	key := d.prefix + name
	node := &dirNode{fsys: d.fsys, prefix: key + "/", local: map[string]*fs.Inode{}}
	ino := d.NewInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: inoOf(key + "/")})
	d.setLocal(name, ino)
	fillAttr(node, &out.Attr)
	return ino, 0
}

// checkAbsent returns EEXIST when name exists locally or in S3.
func (d *dirNode) checkAbsent(ctx context.Context, name string) syscall.Errno {
	if !validName(name) {
		return syscall.EINVAL
	}
	if d.localChild(name) != nil {
		return syscall.EEXIST
	}
	d.fsys.meta.forget(d.prefix + name)
	switch _, errno := d.fsys.stat(ctx, d.prefix+name); errno {
	case 0:
		return syscall.EEXIST
	case syscall.ENOENT:
		return 0
	default:
		return errno
	}
}

// Rmdir removes an empty directory: a local one, or one whose objects are all gone.
//
// Problem: a directory in S3 is the keys below it, which other clients add and delete, so the
// metadata cache cannot tell whether it is empty: rm -rf of a tree another client wrote failed
// with ENOTEMPTY once every object was deleted. And a directory marker (prefix/, which S3
// consoles create) keeps a directory listed although it holds nothing.
// Solution: S3 is asked, with a ListObjectsV2 of the prefix of at most two keys. No key, or only
// the marker, is empty: the marker is deleted (with --allow-delete; else EPERM, as for unlink).
// Invariant: rmdir returns 0 only when S3 lists nothing below the directory and no file is
// being written in it.
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if d.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	if !validName(name) {
		return syscall.EINVAL
	}
	ino := d.localChild(name)
	if ino == nil {
		ino = d.GetChild(name)
	}
	if ino != nil {
		child, ok := ino.Operations().(*dirNode)
		if !ok {
			return syscall.ENOTDIR
		}
		if len(child.localEntries()) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	key := d.prefix + name
	marker, errno := d.fsys.emptyDir(ctx, key+"/")
	switch {
	case errno != 0:
		return errno
	case marker && !d.fsys.opts.AllowDelete:
		return syscall.EPERM
	case marker:
		rctx, cancel := d.fsys.requestContext(ctx)
		_, err := d.fsys.client.DeleteObject(rctx, &s3.DeleteObjectInput{Bucket: aws.String(d.fsys.bucket), Key: aws.String(key + "/")})
		cancel()
		if err != nil {
			return toErrno(err)
		}
	}
	d.setLocal(name, nil)
	d.fsys.meta.forget(key)
	return 0
}

// Unlink deletes an object, only with --allow-delete and never while it is being written.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if d.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	if child := d.localChild(name); child != nil {
		// A file being written can be deleted once it is stored: a program that closes a
		// file and deletes it at once (rsync's temporary file after its rename failed) would
		// otherwise find it still being stored by the release and leave it behind.
		fn, ok := child.Operations().(*fileNode)
		if !ok {
			return syscall.EPERM
		}
		if _, w := fn.snapshot(); w != nil && !w.settle() {
			return syscall.EPERM
		}
	}
	if d.localChild(name) != nil || !d.fsys.opts.AllowDelete {
		return syscall.EPERM
	}
	key := d.prefix + name
	d.fsys.meta.forget(key)
	e, errno := d.fsys.stat(ctx, key)
	switch {
	case errno != 0:
		return errno
	case e.isDir:
		return syscall.EISDIR
	}
	rctx, cancel := d.fsys.requestContext(ctx)
	defer cancel()
	_, err := d.fsys.client.DeleteObject(rctx, &s3.DeleteObjectInput{Bucket: aws.String(d.fsys.bucket), Key: aws.String(key)})
	d.fsys.meta.forget(key)
	return toErrno(err)
}

// Create starts a new file; its object appears in S3 when the file is closed. O_SYNC and O_DSYNC
// are refused with EINVAL (syncRefused).
func (d *dirNode) Create(ctx context.Context, name string, flags uint32, _ uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if d.fsys.opts.ReadOnly {
		return nil, nil, 0, syscall.EROFS
	}
	if syncRefused(flags) {
		return nil, nil, 0, syscall.EINVAL
	}
	if !validName(name) {
		return nil, nil, 0, syscall.EINVAL
	}
	if d.localChild(name) != nil {
		return nil, nil, 0, syscall.EEXIST
	}
	key := d.prefix + name
	node := &fileNode{fsys: d.fsys, key: key}
	ino := d.NewInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFREG, Ino: inoOf(key)})
	fn, ok := ino.Operations().(*fileNode)
	if !ok {
		return nil, nil, 0, syscall.EIO
	}
	h, errno := fn.startWrite(ctx, d, name)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	d.setLocal(name, ino)
	fillAttr(fn, &out.Attr)
	// Direct I/O makes the kernel name the writer's descriptor table in every WRITE (closer.go).
	return ino, h, fuse.FOPEN_DIRECT_IO, 0
}

// Rename is not supported: S3 has no rename, and copying would not be atomic.
func (d *dirNode) Rename(context.Context, string, fs.InodeEmbedder, string, uint32) syscall.Errno {
	return d.unsupported()
}

// Symlink is not supported.
func (d *dirNode) Symlink(context.Context, string, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, d.unsupported()
}

// Link is not supported.
func (d *dirNode) Link(context.Context, fs.InodeEmbedder, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, d.unsupported()
}

// Mknod is not supported: only regular files and directories exist.
func (d *dirNode) Mknod(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, d.unsupported()
}

// Setxattr is refused rather than silently dropped.
func (d *dirNode) Setxattr(context.Context, string, []byte, uint32) syscall.Errno {
	return d.unsupported()
}

func (d *dirNode) unsupported() syscall.Errno {
	if d.fsys.opts.ReadOnly {
		return syscall.EROFS
	}
	return syscall.ENOSYS
}

// Statfs reports a very large filesystem, since a bucket has no capacity.
func (d *dirNode) Statfs(_ context.Context, out *fuse.StatfsOut) syscall.Errno {
	const huge = 1 << 50
	out.Bsize, out.Frsize = 4096, 4096
	out.Blocks, out.Bfree, out.Bavail = huge, huge, huge
	out.Files, out.Ffree = huge, huge
	out.NameLen = 1024
	return 0
}

// emptyDir asks S3 whether the directory prefix (ending in "/") is empty: ENOTEMPTY when a key
// other than its marker is below it, else whether the marker exists.
func (f *filesystem) emptyDir(ctx context.Context, prefix string) (marker bool, errno syscall.Errno) {
	rctx, cancel := f.requestContext(ctx)
	defer cancel()
	// Keys below prefix sort after the marker, prefix itself: two keys tell the cases apart.
	out, err := f.client.ListObjectsV2(rctx, &s3.ListObjectsV2Input{
		Bucket:  aws.String(f.bucket),
		Prefix:  aws.String(prefix),
		MaxKeys: aws.Int32(2),
	})
	if err != nil {
		return false, toErrno(err)
	}
	for _, o := range out.Contents {
		if aws.ToString(o.Key) != prefix {
			return false, syscall.ENOTEMPTY
		}
		marker = true
	}
	if len(out.CommonPrefixes) > 0 {
		return false, syscall.ENOTEMPTY
	}
	return marker, 0
}
