// Command s3csi-mounter is the Mountpoint Pod's FUSE S3 client: `s3csi-mounter [OPTIONS] BUCKET
// DIRECTORY` with mount-s3's options and semantics, where DIRECTORY may be /dev/fd/N, a
// /dev/fuse descriptor a privileged process opened, mounted and passed, so that the mounter
// itself needs no privilege.
//
// In a Mountpoint Pod it runs as `s3csi-mounter --comm-dir=DIR`: it listens on DIR/mount.sock
// for the node-agent's mount request (the /dev/fuse descriptor, bucket and options), serves it,
// and exits 0 when DIR/mount.exit exists, else writes DIR/mount.err and exits 1.
//
// With S3CSI_MOUNTER_ENGINE=mount-s3 it runs AWS's mount-s3 binary (from PATH, or the path in
// S3CSI_MOUNT_S3_PATH) with the same options instead, in both modes: on the command line it
// replaces itself with mount-s3; in a Mountpoint Pod it starts mount-s3 on the passed descriptor.
package main

import (
	"os"

	"github.com/s3csi/s3csi/services/mounter/internal/app"
)

func main() {
	os.Exit(app.Run(os.Args[1:]))
}
