package servicecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/s3csi/s3csi/shared/logging"
)

// Exit codes of Main.
const (
	// ExitOK follows a signal-driven shutdown or --help.
	ExitOK = 0
	// ExitFailure means the service failed; the error is logged.
	ExitFailure = 1
	// ExitUsage means bad flags or invalid options: the service never started.
	ExitUsage = 2
)

// Options is what Main needs of a service's options. A service's Options embeds CommonOptions,
// which provides LoggingOptions.
type Options interface {
	// AddFlags registers every option on fs, with the current values as defaults.
	AddFlags(fs *pflag.FlagSet)
	// Validate reports every invalid option at once, naming the flags to fix.
	Validate() error
	// LoggingOptions returns the validated logging options.
	LoggingOptions() logging.Options
}

// Main runs the whole life of the service binary called name and returns its exit code for
// os.Exit: it parses os.Args into opts, validates them, installs the logger, then runs run under
// a context canceled on SIGINT or SIGTERM, with the logger in the context (logr.FromContext).
//
// It returns rather than exits so that its deferred calls run; only main calls os.Exit.
func Main[O Options](name string, opts O, run func(context.Context, O) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runMain(ctx, name, os.Args[1:], os.Stderr, opts, run)
}

// runMain is Main with its context, arguments and output given, for tests.
func runMain[O Options](ctx context.Context, name string, args []string, stderr io.Writer, opts O,
	run func(context.Context, O) error,
) int {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return ExitOK
		}
		_, _ = fmt.Fprintf(stderr, "%s: %v\nRun %s --help for usage.\n", name, err, name)
		return ExitUsage
	}
	if err := opts.Validate(); err != nil {
		// No logger yet: its own options may be the invalid ones.
		_, _ = fmt.Fprintf(stderr, "%s: invalid options:\n%v\n", name, err)
		return ExitUsage
	}

	log := logging.New(opts.LoggingOptions(), stderr)
	logging.Install(log)
	if err := run(logr.NewContext(ctx, log), opts); err != nil {
		log.Error(err, "Exiting on error")
		return ExitFailure
	}
	return ExitOK
}
