package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Propagation is how mounts made under a mount point reach other mount namespaces: the
// optional fields of its mount table line (man 5 proc, "shared subtrees").
type Propagation string

// Propagation types, as a container's volume shows them for each mountPropagation.
const (
	// Shared ("shared:N"): mounts made under it reach its peers, the host's mount among them
	// for a Bidirectional volume.
	Shared Propagation = "shared"
	// Slave ("master:N" only): it receives the host's mounts but sends none back
	// (HostToContainer).
	Slave Propagation = "slave"
	// Private (neither): nothing propagates either way (None, the default).
	Private Propagation = "private"
)

// PropagationOf returns e's propagation; a mount that is both shared and a slave is Shared,
// since mounts made under it still reach its peers.
func PropagationOf(e Entry) Propagation {
	slave := false
	for _, f := range e.OptionalFields {
		switch {
		case strings.HasPrefix(f, "shared:"):
			return Shared
		case strings.HasPrefix(f, "master:"):
			slave = true
		}
	}
	if slave {
		return Slave
	}
	return Private
}

// Containing returns the topmost mount that path (clean and absolute, symlinks resolved)
// lies in: the one with the longest mount point that is path or one of its ancestors.
func (t Table) Containing(path string) (Entry, bool) {
	path = filepath.Clean(path)
	best, found := Entry{}, false
	for _, e := range t {
		mp := e.MountPoint
		within := path == mp || mp == "/" || strings.HasPrefix(path, mp+"/")
		// >= keeps the last of several mounts at one point: the topmost.
		if within && (!found || len(mp) >= len(best.MountPoint)) {
			best, found = e, true
		}
	}
	return best, found
}

// ErrNotPropagated is the error of CheckPropagates for a mount that does not share.
var ErrNotPropagated = errors.New("mounts made here do not propagate")

// CheckPropagates checks that a mount made under dir reaches the peers of the mount that
// contains dir: that this mount is Shared. It returns that mount's entry, and an error
// wrapping ErrNotPropagated when it is a Slave or Private. dir's symlinks are resolved as far
// as it exists, since the mount table names real paths.
//
// Problem: a bind made under a kubelet dir that the node-agent's container mounted without
// Bidirectional propagation exists in the node-agent's mount namespace only; its own mount
// table shows it, yet kubelet and the workload see an empty directory.
// Solution: look at the propagation of the mount the bind would be made under.
// Invariant: nil means the kernel copies every mount made under dir to the mount's peers
// (in Kubernetes, Bidirectional is refused by the container runtime unless the host's side
// is shared, so those peers include the host's mount).
func CheckPropagates(dir string) (Entry, error) {
	resolved, err := resolveExisting(dir)
	if err != nil {
		return Entry{}, err
	}
	table, err := ReadTable()
	if err != nil {
		return Entry{}, err
	}
	e, ok := table.Containing(resolved)
	if !ok {
		return Entry{}, fmt.Errorf("no mount contains %s", resolved)
	}
	if p := PropagationOf(e); p != Shared {
		return e, fmt.Errorf("%w: %s lies in mount %s, whose propagation is %s", ErrNotPropagated, dir, e.MountPoint, p)
	}
	return e, nil
}

// resolveExisting resolves the symlinks of path's longest existing ancestor and appends the
// rest.
func resolveExisting(path string) (string, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", path, err)
	}
	rest := ""
	for {
		resolved, err := filepath.EvalSymlinks(path)
		if err == nil {
			return filepath.Join(resolved, rest), nil
		}
		if !errors.Is(err, os.ErrNotExist) || path == "/" {
			return "", fmt.Errorf("resolve %s: %w", path, err)
		}
		rest = filepath.Join(filepath.Base(path), rest)
		path = filepath.Dir(path)
	}
}
