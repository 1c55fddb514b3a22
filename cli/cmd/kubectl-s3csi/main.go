// Command kubectl-s3csi is the s3csi kubectl plugin (kubectl s3csi): it reads the audit trail
// of the event bus (events), what the API server holds about mounts (status), and republishes
// events for tests and rehearsals (replay).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/s3csi/s3csi/cli/internal/command"
)

// main exits 0 on success (and when interrupted while following), 1 when a command fails and 2
// for a bad command line.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := command.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
