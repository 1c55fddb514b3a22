// Command prog is the program of the test images: a static Go binary with one dependency module
// (go-digest), so that its SBOM names a dependency with a version and a go.sum hash.
package main

import (
	"os"

	"github.com/opencontainers/go-digest"
)

func main() {
	_, _ = os.Stdout.WriteString(digest.FromString("s3csi").String() + "\n")
}
