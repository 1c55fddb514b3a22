// Command imagebuild builds the project's container images without a container engine (one layer
// of static binaries and files on an empty base) and the other release files.
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
//	imagebuild push -registry HOST[:PORT]/PREFIX [-chart CHART.tgz -helm HELM] DIR...
//	    push each layout's index, its images and their SBOMs to PREFIX/<base of DIR>:<tag>,
//	    with the Docker config's credentials; plain HTTP only to a loopback registry; then
//	    `helm push` CHART.tgz to oci://HOST[:PORT]/PREFIX/charts (--plain-http likewise), and
//	    print the `helm install` of that chart with those images
//	imagebuild plugin -out DIR -version V -url URL -homepage URL -license FILE -created TIME
//	    -bin OS/ARCH=kubectl-s3csi...
//	    write DIR/kubectl-s3csi_V_OS_ARCH.tar.gz (the binary and LICENSE) per -bin, reproducibly,
//	    and the Krew manifest DIR/s3csi.yaml naming URL/<archive> and its SHA-256
//	imagebuild retime -time TIME FILE.tgz...
//	    set every entry's time in each gzip tarball (helm package stamps the time of day)
//	imagebuild checksums -dir DIR
//	    write DIR/images.txt (each OCI layout's index digest) and DIR/SHA256SUMS (every other
//	    file but the layouts' blobs), and list the files and each image's size per platform
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
