package app

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// autoUnmountFlag runs the watcher of --auto-unmount: `s3csi-mounter --auto-unmount-watch=DIR`.
const autoUnmountFlag = "--auto-unmount-watch="

// startAutoUnmount starts a watcher process that unmounts dir once this process is gone, however
// it ended (SIGKILL and crashes included), as fusermount's auto_unmount does for mount-s3: the
// watcher holds the read end of a pipe whose write end only this process has, and reads EOF
// when the kernel closes it at exit. The caller keeps the returned write end open (and
// reachable: a collected *os.File closes its descriptor) until the mount has ended.
func startAutoUnmount(dir string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start auto-unmount watcher: %w", err)
	}
	defer func() { _ = r.Close() }()
	cmd := exec.Command("/proc/self/exe", autoUnmountFlag+dir) //nolint:gosec // this very binary
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	// Its own session: a Ctrl-C meant for the mounter must not kill the watcher first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("start auto-unmount watcher: %w", err)
	}
	_ = cmd.Process.Release()
	return w, nil
}

// watchAndUnmount waits for EOF on stdin, then lazily unmounts dir if it still holds a FUSE
// filesystem: after a clean exit the mounter already unmounted it and there is nothing to do.
func watchAndUnmount(dir string) int {
	_, _ = io.Copy(io.Discard, os.Stdin)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type != unix.FUSE_SUPER_MAGIC {
		return 0
	}
	// A dead FUSE mount fails statfs with ENOTCONN: it is ours to remove as well.
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
		fmt.Fprintf(os.Stderr, "%s: auto-unmount %s: %v\n", binary, dir, err)
		return 1
	}
	return 0
}
