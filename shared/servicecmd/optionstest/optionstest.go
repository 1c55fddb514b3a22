// Package optionstest holds the checks every service's options tests make, so that their tables
// list only the cases and the harness is written once.
package optionstest

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Flagger is anything that registers its options as flags.
type Flagger interface {
	AddFlags(fs *pflag.FlagSet)
}

// ParseFlags registers opts' flags on a fresh flag set, as a service's main does, and parses args
// into opts, failing t on a parse error.
func ParseFlags(t testing.TB, opts Flagger, args ...string) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse flags %q: %v", args, err)
	}
}

// CheckErrors marks t failed unless err, the result of a Validate, names every string in want;
// with want empty, unless err is nil. It reports every missing name, not only the first.
func CheckErrors(t testing.TB, err error, want ...string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Errorf("Validate() = %v, want nil", err)
		}
		return
	}
	if err == nil {
		t.Errorf("Validate() = nil, want an error naming %q", want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %v, want it to name %q", err, w)
		}
	}
}
