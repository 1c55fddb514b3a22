package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/mppod"
)

// KubeletDir is a temporary directory laid out like a kubelet root dir (/var/lib/kubelet).
type KubeletDir struct {
	// Root stands for /var/lib/kubelet.
	Root string
}

// NewKubeletDir lays out a kubelet root dir under parent: pods/, plugins/<driver>/mnt/ and
// plugins_registry/.
func NewKubeletDir(parent string) (*KubeletDir, error) {
	k := &KubeletDir{Root: filepath.Join(parent, "kubelet")}
	for _, dir := range []string{
		filepath.Join(k.Root, "pods"),
		mppod.SourcesDir(k.Root),
		k.RegistryDir(),
	} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create kubelet dir: %w", err)
		}
	}
	return k, nil
}

// StartKubeletDir makes a kubelet root dir in the test's temporary directory and, as kubelet
// does with its root dir, a shared mount of it (the node-agent checks that the mounts it makes
// there propagate); the mount goes when the test ends. It needs root.
func StartKubeletDir(t testing.TB) *KubeletDir {
	t.Helper()
	return StartKubeletDirIn(t, t.TempDir())
}

// StartKubeletDirIn is StartKubeletDir under parent, for a short path: a unix socket's path
// (the CSI socket under plugins/) is at most 107 bytes, and t.TempDir's can take most of them.
func StartKubeletDirIn(t testing.TB, parent string) *KubeletDir {
	t.Helper()
	k, err := NewKubeletDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(k.Root, k.Root, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mount the kubelet dir on itself (run as root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(k.Root, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the kubelet dir: %v", err)
		}
	})
	if err := unix.Mount("", k.Root, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatalf("make the kubelet dir shared: %v", err)
	}
	return k
}

// TargetPath is the path kubelet passes to NodePublishVolume for a pod's CSI volume.
func (k *KubeletDir) TargetPath(podUID, pvName string) string {
	return filepath.Join(k.Root, "pods", podUID, "volumes", "kubernetes.io~csi", pvName, "mount")
}

// SourceDir is the FUSE mount point of a Mountpoint Pod. Unlike mppod.SourceDir it does not
// validate the name, so tests can name paths a forged name would reach.
func (k *KubeletDir) SourceDir(mountpointPodName string) string {
	return filepath.Join(mppod.SourcesDir(k.Root), mountpointPodName)
}

// RegistryDir is where kubelet looks for plugin registration sockets.
func (k *KubeletDir) RegistryDir() string {
	return filepath.Join(k.Root, "plugins_registry")
}
