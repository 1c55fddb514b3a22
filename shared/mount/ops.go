package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// FUSEMaxRead is the max_read of every FUSE mount the node-agent makes. The filesystem server
// must use it as its maximum write size (go-fuse: MountOptions.MaxWrite), or the kernel and the
// server disagree on request sizes. 1 MiB is the kernel's default maximum.
const FUSEMaxRead = 1 << 20

// maxUnmountRounds bounds the unmount loop for paths with stacked mounts.
const maxUnmountRounds = 8

// busyRetries and busyPause bound the retries of an unmount refused with EBUSY: the kernel
// drops the references of a just-removed bind mount asynchronously, so a source unmounted
// right after its last bind can be briefly busy.
const (
	busyRetries = 20
	busyPause   = 100 * time.Millisecond
)

// FUSE opens /dev/fuse and mounts a FUSE filesystem served through that file on dir, as
// the upstream drivers do: the caller then hands the file to the filesystem server, which needs
// no privilege of its own. The kernel options always include allow_other because targets are
// bind-mounted into containers running as any user; which users may enter is enforced by the
// filesystem (--allow-other, --allow-root, --uid, --gid, modes).
//
// On error nothing stays mounted and the file is closed.
func FUSE(dir string, readOnly bool) (*os.File, error) {
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/fuse: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		_ = dev.Close()
		return nil, fmt.Errorf("stat FUSE mount point %s: %w", dir, err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=%o,user_id=0,group_id=0,default_permissions,allow_other,max_read=%d",
		dev.Fd(), st.Mode&unix.S_IFMT, FUSEMaxRead)
	flags := uintptr(unix.MS_NODEV | unix.MS_NOSUID | unix.MS_NOATIME)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount(FUSESource, dir, "fuse", flags, data); err != nil {
		_ = dev.Close()
		return nil, fmt.Errorf("mount FUSE on %s: %w", dir, err)
	}
	return dev, nil
}

// BindMount bind-mounts source on target (nosuid, nodev), read-only when asked. The read-only
// flag needs a second remount call: the kernel ignores MS_RDONLY on the first bind.
// On error nothing stays mounted on target.
func BindMount(source, target string, readOnly bool) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", source, target, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		_ = unix.Unmount(target, 0)
		return fmt.Errorf("remount bind %s with nosuid,nodev (read-only %t): %w", target, readOnly, err)
	}
	return nil
}

// Unmount removes every mount at path until the mount table lists none. It succeeds on a path
// that is missing, not mounted or corrupted: unmounting a dead FUSE mount needs nothing from
// its server. It never detaches lazily: a busy mount is an error, so nothing is hidden that is
// still in use.
func Unmount(path string) error {
	path = filepath.Clean(path)
	for range maxUnmountRounds {
		table, err := ReadTable()
		if err != nil {
			return err
		}
		if _, ok := table.Lookup(path); !ok {
			return nil
		}
		err = unmountRetryingBusy(path)
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after %d attempts", path, maxUnmountRounds)
}

func unmountRetryingBusy(path string) error {
	for i := 0; ; i++ {
		err := unix.Unmount(path, unix.UMOUNT_NOFOLLOW)
		if !errors.Is(err, unix.EBUSY) || i == busyRetries {
			return err
		}
		time.Sleep(busyPause)
	}
}

// RemoveDir removes the empty directory path; a missing path is not an error. It refuses to
// remove anything while path is a mount point, and never removes recursively: a recursive
// delete through a live FUSE mount would delete the user's objects.
func RemoveDir(path string) error {
	table, err := ReadTable()
	if err != nil {
		return err
	}
	if _, ok := table.Lookup(path); ok {
		return fmt.Errorf("remove %s: still a mount point", path)
	}
	if err := unix.Rmdir(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
