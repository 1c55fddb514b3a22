// Package mount reads the mount table and makes and removes the node's FUSE source mounts and
// the bind mounts that expose them in workload pods. Every check tolerates a dead FUSE
// connection (ENOTCONN): a broken mount must stay removable.
package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	mountutils "k8s.io/mount-utils"
)

// FUSESource is the source field of every FUSE mount the node-agent makes; the mount table shows
// it, and it is what marks a mount as an S3 mount (legacy systemd mounts used the same name).
const FUSESource = "mountpoint-s3"

// mountInfoPath is this process's view of the mount table.
const mountInfoPath = "/proc/self/mountinfo"

// Entry is one line of the mount table.
type Entry = mountutils.MountInfo

// Table is a snapshot of the mount table.
type Table []Entry

// ReadTable reads the current mount table.
func ReadTable() (Table, error) {
	entries, err := mountutils.ParseMountInfo(mountInfoPath)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return Table(entries), nil
}

// Lookup returns the topmost mount at path (the last one mounted there).
func (t Table) Lookup(path string) (Entry, bool) {
	path = filepath.Clean(path)
	for i := len(t) - 1; i >= 0; i-- {
		if t[i].MountPoint == path {
			return t[i], true
		}
	}
	return Entry{}, false
}

// Binds returns the mounts other than at path that show the same filesystem as the mount at
// path: the bind mounts of a source mount.
func (t Table) Binds(path string) []Entry {
	src, ok := t.Lookup(path)
	if !ok {
		return nil
	}
	var binds []Entry
	for _, e := range t {
		if e.MountPoint != src.MountPoint && SameDevice(e, src) {
			binds = append(binds, e)
		}
	}
	return binds
}

// SameDevice reports whether two mounts show the same filesystem instance.
func SameDevice(a, b Entry) bool {
	return a.Major == b.Major && a.Minor == b.Minor
}

// IsFUSE reports whether e is a FUSE mount.
func IsFUSE(e Entry) bool {
	return e.FsType == "fuse" || strings.HasPrefix(e.FsType, "fuse.")
}

// State is what a path is, as far as mounts are concerned.
type State int

// States of a path.
const (
	// Missing: the path does not exist and nothing is mounted there.
	Missing State = iota
	// NotMounted: the path exists and nothing is mounted there.
	NotMounted
	// Mounted: something is mounted there and answers.
	Mounted
	// Corrupted: something is mounted there but does not answer (ENOTCONN, EIO, ...), e.g. a
	// FUSE mount whose server died.
	Corrupted
	// Hung: a stat of the path did not return within the probe's timeout: a FUSE server that
	// is stopped or stuck. Only a detach removes such a mount while the server stays so.
	Hung
)

func (s State) String() string {
	switch s {
	case Missing:
		return "missing"
	case NotMounted:
		return "not mounted"
	case Mounted:
		return "mounted"
	case Corrupted:
		return "corrupted"
	case Hung:
		return "not answering"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Check returns the state of path and its topmost mount entry; the stat through path takes at
// most ProbeTimeout (see Stat).
func Check(path string) (State, Entry, error) {
	return CheckWithin(path, ProbeTimeout)
}

// CheckWithin is Check with the stat bounded by timeout.
//
// Problem: stat of a dead FUSE mount fails (ENOTCONN), a path can be absent for stat yet
// still be listed as a mount point, and stat of a stopped FUSE server never returns.
// Solution: the mount table decides whether something is mounted; a bounded stat only decides
// whether it answers.
// Invariant: a path listed in the mount table is never reported Missing or NotMounted, and
// CheckWithin returns within timeout (plus the read of the mount table, which never reaches a
// FUSE server).
func CheckWithin(path string, timeout time.Duration) (State, Entry, error) {
	path = filepath.Clean(path)
	table, err := ReadTable()
	if err != nil {
		return 0, Entry{}, err
	}
	entry, listed := table.Lookup(path)
	_, statErr := Stat(path, timeout)
	switch {
	case errors.Is(statErr, ErrNotAnswering):
		return Hung, entry, nil
	case listed && statErr == nil:
		return Mounted, entry, nil
	case listed:
		return Corrupted, entry, nil
	case statErr == nil:
		return NotMounted, Entry{}, nil
	case errors.Is(statErr, unix.ENOENT):
		return Missing, Entry{}, nil
	case mountutils.IsCorruptedMnt(&os.PathError{Op: "stat", Path: path, Err: statErr}):
		// Not listed here but broken: a mount this namespace cannot see. Report it as such
		// rather than guessing.
		return Corrupted, Entry{}, nil
	}
	return 0, Entry{}, fmt.Errorf("stat %s: %w", path, statErr)
}
