package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The pods' network namespaces: containerd mounts each one on a file of /var/run/netns, the
// directory where Podman (netavark) and `ip netns` keep theirs too.
//
// Problem: a tool that wants that directory to be a shared mount point, and finds it is not a
// mount point at all, bind-mounts it onto itself first (MS_BIND|MS_REC, then MS_SHARED): Podman
// does it for a plain `podman run --network bridge`. Every namespace mounted before that bind
// stays mounted on the directory beneath it: the bind shows a copy, containerd unmounts the copy,
// then can neither unlink the file (EBUSY: the hidden mount still sits on it) nor unmount the
// original, which it no longer sees. The pod stays Terminating for good and Down found mounts it
// could not remove.
// Solution: Up makes the directory a shared mount point itself before containerd starts
// (shareNetns), so that such a tool finds a mount point, only marks it shared and stacks
// nothing; namespaces mounted later propagate to its peers. Down lifts every bind it finds
// stacked over namespaces all the same (releaseNetns): a host set up by an older cluster, or
// changed by hand, may hold one. Making the directory shared in the cluster, rather than running
// the container suite's Podman in a mount namespace of its own, protects the cluster from every
// tool on the host (a developer's Podman, `ip netns add`), not only from our suite's.
// Invariant: Down removes a bind on the directory only when it hides namespaces, or when the
// cluster's marker (hostDir/netns-bind, holding the mount's ID) says the cluster made it; a bind
// another tool made and that hides nothing stays.

// netnsDir is the directory as the mount table names it: /var/run/netns with /var/run resolved
// (Debian links it to /run, so containerd's /var/run/netns and Podman's /run/netns are one).
func netnsDir() string {
	parent, err := filepath.EvalSymlinks("/var/run")
	if err != nil {
		parent = "/var/run"
	}
	return filepath.Join(parent, "netns")
}

// netnsMarker records that Up made netnsDir a mount point, and which mount it is.
func (c Config) netnsMarker() string { return filepath.Join(c.hostDir(), "netns-bind") }

// shareNetns makes dir a shared mount point, by binding it onto itself, unless it already is a
// mount point (a tool that wants it shared then has nothing to stack). It records the bind in
// marker. A dir holding mounted namespaces while not being a mount point is left as it is: a bind
// would hide them, which is the harm it prevents.
func shareNetns(dir, marker string, logf func(string, ...any)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	table, err := readMountTable()
	if err != nil {
		return err
	}
	if _, ok := topOf(table, dir); ok {
		return nil
	}
	if below := mountedBelow(table, dir); len(below) > 0 {
		logf("%s is not a mount point and %d network namespaces are mounted in it (first %s): left as it is, since binding it would hide them",
			dir, len(below), below[0].point)
		return nil
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", dir, err)
	}
	undo := func(err error) error {
		if uerr := unix.Unmount(dir, 0); uerr != nil {
			return fmt.Errorf("%w (and unmount it again: %w)", err, uerr)
		}
		return err
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return undo(fmt.Errorf("make %s a shared mount: %w", dir, err))
	}
	if table, err = readMountTable(); err != nil {
		return undo(err)
	}
	top, ok := topOf(table, dir)
	if !ok {
		return undo(fmt.Errorf("bind %s onto itself: the mount table does not show it", dir))
	}
	if err := os.MkdirAll(filepath.Dir(marker), 0o700); err != nil {
		return undo(fmt.Errorf("create host record dir: %w", err))
	}
	if err := os.WriteFile(marker, []byte(strconv.Itoa(top.id)+"\n"), 0o600); err != nil {
		return undo(fmt.Errorf("record the bind of %s: %w", dir, err))
	}
	logf("made %s a shared mount point, so that no tool stacks a bind over the pods' network namespaces", dir)
	return nil
}

// releaseNetns removes the cluster's network namespaces from dir (the files cni-*, and their
// mounts) and the cluster's own bind of dir, after lifting every bind stacked over hidden
// namespaces so that they can be unmounted at all.
func releaseNetns(dir, marker string, logf func(string, ...any)) error {
	lifted, err := liftHidingBinds(dir)
	if lifted > 0 {
		logf("lifted %d bind(s) hiding network namespaces on %s", lifted, dir)
	}
	if err != nil {
		return err
	}
	netns, err := filepath.Glob(filepath.Join(dir, "cni-*"))
	if err != nil {
		return fmt.Errorf("list network namespaces: %w", err)
	}
	if err := unmountAll(netns...); err != nil {
		return err
	}
	var errs []error
	for _, ns := range netns {
		if err := os.Remove(ns); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove network namespace: %w", err))
		}
	}
	if len(netns) > 0 {
		logf("removed %d network namespaces of the pods from %s", len(netns), dir)
	}
	return errors.Join(append(errs, removeOwnBind(dir, marker, logf))...)
}

// liftHidingBinds unmounts the topmost mount on dir for as long as mounts below dir sit under it,
// hidden, and returns how many it unmounted.
//
// A tool's bind (MS_REC) carries copies of the mounts it covered, and mounts made on it since:
// they make a plain unmount fail with EBUSY, and then go with the bind (MNT_DETACH). The files
// stay (a bind of a dir onto itself shows the same dir), and the originals, visible again, are
// unmounted by the caller.
func liftHidingBinds(dir string) (int, error) {
	lifted := 0
	for range 16 {
		table, err := readMountTable()
		if err != nil {
			return lifted, err
		}
		top, ok := topOf(table, dir)
		if !ok {
			return lifted, nil
		}
		hidden := hiddenBelow(table, dir, top)
		if len(hidden) == 0 {
			return lifted, nil
		}
		err = unix.Unmount(dir, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(dir, unix.MNT_DETACH)
		}
		if err != nil {
			return lifted, fmt.Errorf("unmount the bind (mount %d) hiding %d mounts under %s, first %s: %w",
				top.id, len(hidden), dir, hidden[0].point, err)
		}
		lifted++
	}
	return lifted, fmt.Errorf("mounts under %s stay hidden after %d binds lifted: see /proc/self/mountinfo", dir, lifted)
}

// removeOwnBind unmounts the bind of dir that marker records, and the marker with it. A bind that
// is gone already only loses its marker; one that another mount covers, or that holds mounts of
// another tool, stays with its marker, for the next Down.
func removeOwnBind(dir, marker string, logf func(string, ...any)) error {
	b, err := os.ReadFile(marker)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the record of the bind of %s: %w", dir, err)
	}
	id, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	table, err := readMountTable()
	if err != nil {
		return err
	}
	top, _ := topOf(table, dir)
	mine := false
	for _, m := range table {
		mine = mine || (m.id == id && m.point == dir)
	}
	switch {
	case !mine:
		// Gone already: the host restarted, or it hid namespaces and was lifted.
	case top.id != id:
		logf("left the cluster's bind of %s in place: another mount (%d) sits on it", dir, top.id)
		return nil
	default:
		if err := unix.Unmount(dir, 0); errors.Is(err, unix.EBUSY) {
			logf("left the cluster's bind of %s in place: it is busy (%d mounts of other tools on it); the next down removes it",
				dir, len(mountedBelow(table, dir)))
			return nil
		} else if err != nil {
			return fmt.Errorf("unmount the cluster's bind of %s: %w", dir, err)
		}
	}
	if err := os.Remove(marker); err != nil {
		return fmt.Errorf("remove the record of the bind of %s: %w", dir, err)
	}
	return nil
}

// topOf is the topmost mount whose mount point is dir: the one no other mount on dir sits on.
func topOf(table []mountEntry, dir string) (mountEntry, bool) {
	covered := map[int]bool{}
	var on []mountEntry
	for _, m := range table {
		if m.point == dir {
			on = append(on, m)
			covered[m.parent] = true
		}
	}
	for _, m := range on {
		if !covered[m.id] {
			return m, true
		}
	}
	return mountEntry{}, false
}

// mountedBelow lists the mounts strictly below dir.
func mountedBelow(table []mountEntry, dir string) []mountEntry {
	var out []mountEntry
	for _, m := range table {
		if m.point != dir && under(m.point, dir) {
			out = append(out, m)
		}
	}
	return out
}

// hiddenBelow lists the mounts below dir that do not hang from top, the topmost mount on dir:
// the path resolves to top's tree, so no one reaches them by name.
func hiddenBelow(table []mountEntry, dir string, top mountEntry) []mountEntry {
	byID := make(map[int]mountEntry, len(table))
	for _, m := range table {
		byID[m.id] = m
	}
	var out []mountEntry
	for _, m := range mountedBelow(table, dir) {
		// Climb past mounts nested below dir to the mount the first of them sits on.
		p, ok := byID[m.parent]
		for ok && p.point != dir && under(p.point, dir) {
			p, ok = byID[p.parent]
		}
		if ok && p.id != top.id {
			out = append(out, m)
		}
	}
	return out
}
