// Command s3csi-pod-reconciler watches workload pods that use s3csi volumes and creates their
// Mountpoint Pods and MountpointS3PodAttachments.
package main

import (
	"os"

	"github.com/s3csi/s3csi/shared/servicecmd"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/app"
	"github.com/s3csi/s3csi/services/pod-reconciler/internal/options"
)

const binary = "s3csi-pod-reconciler"

// main exits 0 after a signal-driven shutdown or --help, 1 when the service fails and 2 for bad
// flags or invalid options (servicecmd.Main).
func main() {
	os.Exit(servicecmd.Main(binary, options.New(), app.Run))
}
