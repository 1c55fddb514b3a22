package mount

import (
	"fmt"
	"os"
	"path/filepath"
)

// FUSEReadAheadKiB is the kernel readahead, in KiB, given to every FUSE mount of the filesystem.
//
// Problem: the kernel gives a FUSE mount the default readahead of 128 KiB, so a sequential
// reader reaches the filesystem as one 128 KiB request at a time: eight requests, replies and
// wake-ups per MiB, with at most one or two requests in flight.
// Solution: 4 MiB of readahead lets the kernel send requests of FUSEMaxRead, several at once,
// which the filesystem answers in parallel from its prefetch window. Random readers are not
// affected: the kernel reads ahead only for reads it sees as sequential.
const FUSEReadAheadKiB = 4096

// SetReadAhead sets the kernel readahead of the mount at dir to kib KiB, through the sysfs file
// of the mount's backing device (/sys/class/bdi/MAJOR:MINOR/read_ahead_kb). It reads only the
// mount table, never the mount, so it cannot block on a FUSE server that does not serve yet. The
// caller must be root in the initial user namespace with /sys writable: the process that mounts
// /dev/fuse for an unprivileged server calls it once the server serves, because the kernel
// lowers the readahead to what the server accepts when it answers FUSE_INIT.
func SetReadAhead(dir string, kib int) error {
	table, err := ReadTable()
	if err != nil {
		return err
	}
	e, ok := table.Lookup(dir)
	if !ok {
		return fmt.Errorf("set readahead of %s: not mounted", dir)
	}
	path := filepath.Join("/sys/class/bdi", fmt.Sprintf("%d:%d", e.Major, e.Minor), "read_ahead_kb")
	if err := os.WriteFile(path, fmt.Appendf(nil, "%d", kib), 0o644); err != nil { //nolint:gosec // a sysfs attribute, not a file we create
		return fmt.Errorf("set readahead of %s: %w", dir, err)
	}
	return nil
}
