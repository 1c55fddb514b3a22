// Package logging builds the one logr.Logger every s3csi service logs through, so that the
// services, controller-runtime and client-go all write the same structured format at the same
// verbosity.
package logging

import (
	"errors"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Verbosity levels for logger.V(level). Use these names, never bare integers, so that
// "--log-level=1" means the same thing in every service.
const (
	// Info is for what an operator wants to see by default: state changes, mounts, cleanups.
	Info = 0
	// Debug adds the decisions behind state changes (why a pod was skipped, why a wait ended).
	Debug = 1
	// Trace adds per-request and per-event detail; too noisy for production.
	Trace = 4
)

// maxVerbosity bounds --log-level. controller-runtime maps V(n) to zap level -n, an int8, and
// nothing in the codebase logs above Trace, so a larger value is a typo.
const maxVerbosity = 10

// Log formats accepted by --log-format.
const (
	// FormatJSON writes one JSON object per line; the default, because log pipelines parse it.
	FormatJSON = "json"
	// FormatText writes human-readable lines for a developer's terminal.
	FormatText = "text"
)

// Options are the logging flags shared by every service.
type Options struct {
	// Format is FormatJSON or FormatText.
	Format string
	// Verbosity is the highest V-level written (Info, Debug, Trace, ...). Errors are always written.
	Verbosity int
}

// NewOptions returns the defaults: JSON at Info.
func NewOptions() Options {
	return Options{Format: FormatJSON, Verbosity: Info}
}

// AddFlags registers --log-format and --log-level (shorthand -v, as with klog-based binaries).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Format, "log-format", o.Format, `log format: "json" or "text"`)
	fs.IntVarP(&o.Verbosity, "log-level", "v", o.Verbosity,
		fmt.Sprintf("log verbosity: %d info, %d debug, %d trace", Info, Debug, Trace))
}

// Validate reports every invalid logging option at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Format != FormatJSON && o.Format != FormatText {
		errs = append(errs, fmt.Errorf("--log-format must be %q or %q, got %q", FormatJSON, FormatText, o.Format))
	}
	if o.Verbosity < 0 || o.Verbosity > maxVerbosity {
		errs = append(errs, fmt.Errorf("--log-level must be between 0 and %d, got %d", maxVerbosity, o.Verbosity))
	}
	return errors.Join(errs...)
}

// New builds the logger described by validated options, writing to w (os.Stderr in the services).
// Stack traces are attached to errors only, as in controller-runtime's production mode.
func New(o Options, w io.Writer) logr.Logger {
	// Readable timestamps in both formats: zap's production default is epoch seconds.
	timestamps := func(c *zapcore.EncoderConfig) { c.EncodeTime = zapcore.RFC3339NanoTimeEncoder }
	format := zap.JSONEncoder(timestamps)
	if o.Format == FormatText {
		format = zap.ConsoleEncoder(timestamps)
	}
	return zap.New(
		format,
		zap.WriteTo(w),
		zap.Level(zapcore.Level(-o.Verbosity)),
		zap.StacktraceLevel(zapcore.ErrorLevel),
	)
}

// Install makes l the logger behind controller-runtime and klog (client-go, leader election), so a
// service writes one format only. It sets process-wide state: call it from main, once.
func Install(l logr.Logger) {
	ctrllog.SetLogger(l)
	klog.SetLogger(l)
}
