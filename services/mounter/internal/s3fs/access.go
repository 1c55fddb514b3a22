package s3fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
)

// restrictAccess enforces mount-s3's --allow-other and --allow-root on fsys, the mount's
// operations served by a process of effective uid owner.
//
// Problem: a FUSE mount lets every user in once the kernel holds allow_other, and the node-agent
// always mounts with allow_other (bind targets are entered by containers of any uid), as a root
// mounter must for --allow-root; mount-s3's rule is that, without --allow-other, only the user
// running it, and root with --allow-root, may use the mount.
// Solution: with --allow-other nothing is filtered; otherwise every operation that names a path
// or an inode answers EACCES to other callers. Operations on an open handle (read, write,
// release, readdir...) pass, as in libfuse: a handle was only obtained through an allowed open,
// and the kernel sends some of them (writeback, readahead) on behalf of no particular user.
func restrictAccess(fsys fuse.RawFileSystem, owner uint32, allowOther, allowRoot bool) fuse.RawFileSystem {
	if allowOther {
		return fsys
	}
	return &ownerOnly{RawFileSystem: fsys, owner: owner, root: allowRoot}
}

type ownerOnly struct {
	fuse.RawFileSystem
	owner uint32
	root  bool
}

func (o *ownerOnly) denied(h *fuse.InHeader) bool {
	return h.Uid != o.owner && (!o.root || h.Uid != 0)
}

func (o *ownerOnly) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if o.denied(h) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Lookup(c, h, name, out)
}

func (o *ownerOnly) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.GetAttr(c, in, out)
}

func (o *ownerOnly) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.SetAttr(c, in, out)
}

func (o *ownerOnly) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Statx(c, in, out)
}

func (o *ownerOnly) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Access(c, in)
}

func (o *ownerOnly) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	if o.denied(h) {
		return fuse.EACCES
	}
	return o.RawFileSystem.StatFs(c, h, out)
}

func (o *ownerOnly) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Open(c, in, out)
}

func (o *ownerOnly) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.OpenDir(c, in, out)
}

func (o *ownerOnly) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Create(c, in, name, out)
}

func (o *ownerOnly) Tmpfile(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Tmpfile(c, in, out)
}

func (o *ownerOnly) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Mknod(c, in, name, out)
}

func (o *ownerOnly) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Mkdir(c, in, name, out)
}

func (o *ownerOnly) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if o.denied(h) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Unlink(c, h, name)
}

func (o *ownerOnly) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if o.denied(h) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Rmdir(c, h, name)
}

func (o *ownerOnly) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Rename(c, in, oldName, newName)
}

func (o *ownerOnly) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Link(c, in, name, out)
}

func (o *ownerOnly) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	if o.denied(h) {
		return fuse.EACCES
	}
	return o.RawFileSystem.Symlink(c, h, target, name, out)
}

func (o *ownerOnly) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	if o.denied(h) {
		return nil, fuse.EACCES
	}
	return o.RawFileSystem.Readlink(c, h)
}

func (o *ownerOnly) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if o.denied(h) {
		return 0, fuse.EACCES
	}
	return o.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (o *ownerOnly) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	if o.denied(h) {
		return 0, fuse.EACCES
	}
	return o.RawFileSystem.ListXAttr(c, h, dest)
}

func (o *ownerOnly) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if o.denied(&in.InHeader) {
		return fuse.EACCES
	}
	return o.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (o *ownerOnly) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	if o.denied(h) {
		return fuse.EACCES
	}
	return o.RawFileSystem.RemoveXAttr(c, h, attr)
}
