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

// Name is the Mountpoint Pod name for the first workload of an attachment: "mp-" and the hex
// SHA-224 of the workload pod UID followed by the PersistentVolume name.
func Name(workloadPodUID, pvName string) string {
	sum := sha256.Sum224([]byte(workloadPodUID + pvName))
	return "mp-" + hex.EncodeToString(sum[:])
}

// PluginDir is the driver's directory under the kubelet root dir.
func PluginDir(kubeletDir string) string {
	return filepath.Join(kubeletDir, "plugins", DriverName)
}

// SourceDir is where the node-agent mounts the FUSE filesystem of a Mountpoint Pod; workload
// targets are bind mounts of it.
func SourceDir(kubeletDir, mountpointPodName string) string {
	return filepath.Join(PluginDir(kubeletDir), "mnt", mountpointPodName)
}

// SourceNames lists the Mountpoint Pods that have a source dir under the kubelet dir; none when
// the driver's plugin dir does not exist yet.
func SourceNames(kubeletDir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(PluginDir(kubeletDir), "mnt"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list source dirs: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
