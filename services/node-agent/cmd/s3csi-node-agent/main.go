// Command s3csi-node-agent is the per-node DaemonSet: it serves the CSI Identity and Node
// services and mounts S3 volumes through the node's Mountpoint Pods.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/s3csi/s3csi/shared/logging"

	"github.com/s3csi/s3csi/services/node-agent/internal/app"
	"github.com/s3csi/s3csi/services/node-agent/internal/options"
)

const binary = "s3csi-node-agent"

func main() {
	os.Exit(run())
}

// run returns the exit code rather than exiting, so that its deferred calls run: 0 after a
// signal-driven shutdown, 1 when the service fails, 2 for bad flags.
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := options.New()
	fs := pflag.NewFlagSet(binary, pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "%s: %v\nRun %s --help for usage.\n", binary, err, binary)
		return 2
	}
	if err := opts.Validate(); err != nil {
		// No logger yet: its own options may be the invalid ones.
		fmt.Fprintf(os.Stderr, "%s: invalid options:\n%v\n", binary, err)
		return 2
	}

	log := logging.New(opts.Logging, os.Stderr)
	logging.Install(log)
	if err := app.Run(logr.NewContext(ctx, log), opts); err != nil {
		log.Error(err, "Exiting on error")
		return 1
	}
	return 0
}
