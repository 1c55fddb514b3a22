// Package mppod names Mountpoint Pods and the node paths that belong to them. The pod-reconciler
// and the node-agent both derive these from the same inputs, so neither has to tell the other.
package mppod

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DriverName is the CSI driver name, kept from the Scality CSI Driver for S3 v2.
const DriverName = "s3.csi.scality.com"

// DefaultNamespace is the namespace of Mountpoint Pods unless MOUNTPOINT_NAMESPACE says otherwise.
const DefaultNamespace = "mount-s3"

// AnnotationNeedsUnmount marks a Mountpoint Pod that serves no workload any more.
const AnnotationNeedsUnmount = "s3.csi.scality.com/needs-unmount"

// Files of the comm emptyDir shared by the node-agent and the Mountpoint Pod.
const (
	CommVolumeName  = "comm"
	CommDirSizeMiB  = 10
	MountSockName   = "mount.sock"
	MountErrName    = "mount.err"
	MountExitName   = "mount.exit"
	CredentialsName = "credentials"
)

// MounterUID is the unprivileged user (and group) the Mountpoint Pod's container runs as. The
// pod-reconciler sets it in the pod spec; the node-agent accepts a mount.sock only when the
// process listening on it runs as this uid.
const MounterUID = 1000

// Name is the Mountpoint Pod name for the first workload of an attachment: "mp-" and the hex
// SHA-224 of the workload pod UID followed by the PersistentVolume name.
func Name(workloadPodUID, pvName string) string {
	sum := sha256.Sum224([]byte(workloadPodUID + pvName))
	return "mp-" + hex.EncodeToString(sum[:])
}

// namePrefix starts every Mountpoint Pod name; nameHexLen is the length of the hex SHA-224 after it.
const (
	namePrefix = "mp-"
	nameHexLen = 2 * sha256.Size224
)

// ErrInvalidName is wrapped when a Mountpoint Pod name does not have the shape Name gives.
var ErrInvalidName = errors.New("invalid Mountpoint Pod name")

// ErrOutsideBase is wrapped when a path built from names would not stay under its base dir.
var ErrOutsideBase = errors.New("path leaves its base dir")

// ValidateName checks that name has the shape Name gives: "mp-" and 56 lowercase hex digits.
// Every name that arrives from the bus, a volume context or the API server is checked before it
// becomes part of a path.
func ValidateName(name string) error {
	hexPart, ok := strings.CutPrefix(name, namePrefix)
	if !ok || len(hexPart) != nameHexLen {
		return fmt.Errorf("%w: %q is not %q and %d hex digits", ErrInvalidName, name, namePrefix, nameHexLen)
	}
	for _, c := range []byte(hexPart) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("%w: %q is not %q and %d lowercase hex digits", ErrInvalidName, name, namePrefix, nameHexLen)
		}
	}
	return nil
}

// Beneath joins elems under base and checks that the cleaned result is base itself or a path
// strictly under it.
//
// Problem: the elements come from names other processes chose; a root process that joins
// "../.." into a path acts outside the driver's dirs.
// Solution: validate names where they are decoded, and check containment here as well, so one
// forgotten validation is not enough to escape.
// Invariant: a nil error means the result is filepath.Clean(base) or below it, lexically.
func Beneath(base string, elems ...string) (string, error) {
	for _, e := range append([]string{base}, elems...) {
		if strings.IndexByte(e, 0) >= 0 {
			return "", fmt.Errorf("%w: %q holds a NUL byte", ErrOutsideBase, e)
		}
	}
	base = filepath.Clean(base)
	p := filepath.Join(append([]string{base}, elems...)...)
	rel, err := filepath.Rel(base, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%w: %q joined under %s", ErrOutsideBase, filepath.Join(elems...), base)
	}
	return p, nil
}

// PluginDir is the driver's directory under the kubelet root dir.
func PluginDir(kubeletDir string) string {
	return filepath.Join(kubeletDir, "plugins", DriverName)
}

// SourcesDir is the dir holding every source dir.
func SourcesDir(kubeletDir string) string {
	return filepath.Join(PluginDir(kubeletDir), "mnt")
}

// SourceDir is where the node-agent mounts the FUSE filesystem of a Mountpoint Pod; workload
// targets are bind mounts of it. It fails unless mountpointPodName passes ValidateName.
func SourceDir(kubeletDir, mountpointPodName string) (string, error) {
	if err := ValidateName(mountpointPodName); err != nil {
		return "", fmt.Errorf("build source dir: %w", err)
	}
	p, err := Beneath(SourcesDir(kubeletDir), mountpointPodName)
	if err != nil {
		return "", fmt.Errorf("build source dir: %w", err)
	}
	return p, nil
}

// SourceNames lists the Mountpoint Pods that have a source dir under the kubelet dir; none when
// the driver's plugin dir does not exist yet. Entries that are not Mountpoint Pod names are not
// the driver's and are left out.
func SourceNames(kubeletDir string) ([]string, error) {
	entries, err := os.ReadDir(SourcesDir(kubeletDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list source dirs: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() && ValidateName(e.Name()) == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
