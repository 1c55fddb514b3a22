// Package commdir reaches into a Mountpoint Pod's comm dir without following links the pod
// planted there.
//
// Problem: the comm emptyDir is writable by the Mountpoint Pod and the node-agent works in it
// as root; a symlink at credentials/, mount.exit or mount.sock would make root write the
// volume's secret keys, or create and truncate files, wherever the link points.
// Solution: the dir itself is opened by the path kubelet made; every name inside it is resolved
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) relative to that fd, files are created with
// O_EXCL and renamed into place with renameat, and what is opened is checked with fstat.
// Invariant: no operation of this package touches an inode outside the opened dir.
package commdir

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrUnsafe is wrapped when a name in the comm dir is a symlink, leads outside the dir, or is
// not the kind of file expected.
var ErrUnsafe = errors.New("unsafe entry in the comm dir")

// resolve is how every name inside a Dir is looked up.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Dir is an open directory of a comm dir. Close it when done.
type Dir struct {
	f *os.File
}

// Open opens the comm dir at path; the path up to it is kubelet's, so it is resolved normally.
func Open(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open comm dir %s: %w", path, err)
	}
	return &Dir{f: os.NewFile(uintptr(fd), path)}, nil
}

// Close closes the dir.
func (d *Dir) Close() error { return d.f.Close() }

// Name is the path the dir was opened by, for messages.
func (d *Dir) Name() string { return d.f.Name() }

func (d *Dir) fd() int { return int(d.f.Fd()) }

func (d *Dir) openat(name string, flags uint64, mode uint64) (int, error) {
	fd, err := unix.Openat2(d.fd(), name, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolve})
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return -1, fmt.Errorf("open %s in %s: %w: a symlink or a path leading outside (%w)", name, d.Name(), ErrUnsafe, err)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s in %s: %w", name, d.Name(), err)
	}
	return fd, nil
}

// Subdir opens the directory name inside d, creating it with perm when missing. A symlink or
// anything but a directory at name is refused.
func (d *Dir) Subdir(name string, perm uint32) (*Dir, error) {
	if err := unix.Mkdirat(d.fd(), name, perm); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("create %s in %s: %w", name, d.Name(), err)
	}
	fd, err := d.openat(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOTDIR) {
		return nil, fmt.Errorf("open %s in %s: %w: not a directory", name, d.Name(), ErrUnsafe)
	}
	if err != nil {
		return nil, err
	}
	return &Dir{f: os.NewFile(uintptr(fd), d.Name()+"/"+name)}, nil
}

// WriteFile replaces name in d with a regular file of mode perm holding data: written to a new
// temporary name (O_EXCL, never an existing inode), synced, then renamed over name. A symlink
// at name is replaced, never followed.
func (d *Dir) WriteFile(name string, data []byte, perm uint32) error {
	tmp, fd, err := d.createTemp(name, perm)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), d.Name()+"/"+tmp)
	renamed := false
	defer func() {
		if !renamed {
			_ = unix.Unlinkat(d.fd(), tmp, 0)
		}
	}()
	// The umask may have narrowed the mode; fchmod sets it exactly.
	if err := unix.Fchmod(fd, perm); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s in %s: %w", name, d.Name(), err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s in %s: %w", name, d.Name(), err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s in %s: %w", name, d.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s in %s: %w", name, d.Name(), err)
	}
	if err := unix.Renameat(d.fd(), tmp, d.fd(), name); err != nil {
		return fmt.Errorf("write %s in %s: %w", name, d.Name(), err)
	}
	renamed = true
	return nil
}

func (d *Dir) createTemp(name string, perm uint32) (string, int, error) {
	var err error
	for i := range 100 {
		tmp := "." + name + "." + strconv.Itoa(os.Getpid()) + "." + strconv.Itoa(i)
		var fd int
		fd, err = d.openat(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, uint64(perm))
		if err == nil {
			return tmp, fd, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	return "", -1, fmt.Errorf("create a temporary file for %s: %w", name, err)
}

// OpenSocket returns an O_PATH handle on the unix socket name in d, refusing a symlink or any
// other kind of file. Connect through SocketPath of it: no path lookup happens after the check.
func (d *Dir) OpenSocket(name string) (*os.File, error) {
	fd, err := d.openat(name, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("stat %s in %s: %w", name, d.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("open %s in %s: %w: not a socket (mode %o)", name, d.Name(), ErrUnsafe, st.Mode)
	}
	return os.NewFile(uintptr(fd), d.Name()+"/"+name), nil
}

// SocketPath is a path that reaches the socket behind an OpenSocket handle; it is short enough
// for a sockaddr_un whatever the comm dir's path.
func SocketPath(sock *os.File) string {
	return "/proc/self/fd/" + strconv.Itoa(int(sock.Fd()))
}
