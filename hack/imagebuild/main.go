// Command imagebuild builds the project's container images without a container engine: one layer
// of static binaries and files on an empty base, written as a docker-archive tarball that
// `ctr images import` and `podman load` accept.
//
//	imagebuild build -out FILE.tar -ref REF -created TIME -file /bin=host/bin -entrypoint /bin ...
//	imagebuild check -out FILE.tar (the same spec flags): read the tarball back and compare
//	imagebuild list FILE.tar...: print reference, size, entrypoint and user of each tarball
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/s3csi/s3csi/hack/imagebuild/image"
)

func main() {
	if err := image.Main(os.Args[1:], os.Stdout); err != nil {
		var usage image.UsageError
		_, _ = fmt.Fprintln(os.Stderr, "imagebuild:", err)
		if errors.As(err, &usage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
