// Command s3csi-janitor is the leader-elected cleanup service: it removes stale attachments,
// orphan Mountpoint Pods and other leaks that the event-driven services left behind.
package main

import (
	"os"

	"github.com/s3csi/s3csi/shared/servicecmd"

	"github.com/s3csi/s3csi/services/janitor/internal/app"
	"github.com/s3csi/s3csi/services/janitor/internal/options"
)

const binary = "s3csi-janitor"

// main exits 0 after a signal-driven shutdown or --help, 1 when the service fails and 2 for bad
// flags or invalid options (servicecmd.Main).
func main() {
	os.Exit(servicecmd.Main(binary, options.New(), app.Run))
}
