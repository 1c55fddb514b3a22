// Command s3csi-controller serves the CSI Identity and Controller services: CreateVolume and
// DeleteVolume create and delete buckets.
package main

import (
	"os"

	"github.com/s3csi/s3csi/shared/servicecmd"

	"github.com/s3csi/s3csi/services/csi-controller/internal/app"
	"github.com/s3csi/s3csi/services/csi-controller/internal/options"
)

const binary = "s3csi-controller"

// main exits 0 after a signal-driven shutdown or --help, 1 when the service fails and 2 for bad
// flags or invalid options (servicecmd.Main).
func main() {
	os.Exit(servicecmd.Main(binary, options.New(), app.Run))
}
