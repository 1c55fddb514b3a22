// Command fusetest-mounter is a Mountpoint Pod mounter for the node-agent's tests:
// `fusetest-mounter --comm-dir=DIR` answers the mount handshake on DIR/mount.sock as
// s3csi-mounter does, with the same exit codes and files, but serves the test filesystem of
// package fusetest instead of a bucket.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/s3csi/s3csi/services/mounter/internal/fusetest"
	"github.com/s3csi/s3csi/services/mounter/internal/mounter"
)

const commDirFlag = "--comm-dir="

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) != 1 || !strings.HasPrefix(args[0], commDirFlag) || args[0] == commDirFlag {
		fmt.Fprintf(os.Stderr, "Usage: fusetest-mounter %sDIR\n", commDirFlag)
		return 2
	}
	dir := strings.TrimPrefix(args[0], commDirFlag)
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, "mounter:", prefix, args) }, funcr.Options{})
	ctx, stopRequested, release := mounter.NotifySignals(logr.NewContext(context.Background(), log))
	defer release()
	return mounter.Run(ctx, dir, fusetest.NewEngine(dir), stopRequested)
}
