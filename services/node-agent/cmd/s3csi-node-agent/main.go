// Command s3csi-node-agent is the per-node DaemonSet: it serves the CSI Identity and Node
// services and mounts S3 volumes through the node's Mountpoint Pods.
package main

import (
	"os"

	"github.com/s3csi/s3csi/shared/servicecmd"

	"github.com/s3csi/s3csi/services/node-agent/internal/app"
	"github.com/s3csi/s3csi/services/node-agent/internal/options"
)

const binary = "s3csi-node-agent"

// main exits 0 after a signal-driven shutdown or --help, 1 when the service fails and 2 for bad
// flags or invalid options (servicecmd.Main).
func main() {
	os.Exit(servicecmd.Main(binary, options.New(), app.Run))
}
