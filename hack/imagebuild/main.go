// Command imagebuild builds the project's container images without a container engine: one layer
// of static binaries and files on an empty base.
//
//	imagebuild build -out FILE.tar -ref REF -created TIME -file /bin=host/bin -entrypoint /bin ...
//	    write the image as a docker-archive tarball (linux/amd64) that `ctr images import` and
//	    `podman load` accept
//	imagebuild check -out FILE.tar (the same spec flags): read the tarball back and compare
//	imagebuild list FILE.tar...: print reference, size, entrypoint and user of each tarball
//	imagebuild index -out DIR -sbom-dir SBOMDIR -platform linux/amd64 -platform linux/arm64
//	    -file /bin=host/linux_{arch}/bin (the other spec flags of build)
//	    write one OCI image index with an image per platform into the OCI layout DIR, tagged
//	    with REF's tag; {arch} in a -file source is each platform's architecture. Each image's
//	    program must be a Go binary built for its platform with CGO_ENABLED=0; its SPDX SBOM is
//	    written into DIR as an artifact referring to the image, and as
//	    SBOMDIR/<base of DIR>-<arch>.spdx.json
//	imagebuild push -registry HOST[:PORT]/PREFIX DIR...
//	    push each layout's index, its images and their SBOMs to PREFIX/<base of DIR>:<tag>,
//	    with the Docker config's credentials; plain HTTP only to a loopback registry
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/s3csi/s3csi/hack/imagebuild/image"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := image.Main(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		var usage image.UsageError
		_, _ = fmt.Fprintln(os.Stderr, "imagebuild:", err)
		if errors.As(err, &usage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
