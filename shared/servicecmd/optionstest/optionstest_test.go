package optionstest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/spf13/pflag"
)

// The table runners are exercised by the servicecmd tests, which run them on their own options.

// recorder is a testing.TB that records failures instead of failing the test that runs it.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

func TestCheckErrors(t *testing.T) {
	tests := []struct {
		name         string
		err          error
		want         []string
		wantFailures int
	}{
		{name: "no error when none is wanted passes", err: nil},
		{name: "an error when none is wanted fails", err: errors.New("--a: bad"), wantFailures: 1},
		{name: "no error when one is wanted fails", err: nil, want: []string{"--a"}, wantFailures: 1},
		{name: "an error naming every wanted flag passes", err: errors.Join(errors.New("--a: bad"), errors.New("--b: bad")), want: []string{"--a", "--b"}},
		{name: "each flag the error does not name is a failure", err: errors.New("--a: bad"), want: []string{"--a", "--b", "--c"}, wantFailures: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			CheckErrors(r, tt.err, tt.want...)
			if len(r.failures) != tt.wantFailures {
				t.Errorf("failures = %q, want %d", r.failures, tt.wantFailures)
			}
		})
	}
}

type flagged struct{ name string }

func (f *flagged) AddFlags(fs *pflag.FlagSet) { fs.StringVar(&f.name, "name", f.name, "a name") }

func TestParseFlags(t *testing.T) {
	f := &flagged{name: "default"}
	ParseFlags(t, f, "--name=set")
	if f.name != "set" {
		t.Errorf("name = %q, want set", f.name)
	}

	r := &recorder{TB: t}
	ParseFlags(r, &flagged{}, "--no-such-flag")
	if len(r.failures) != 1 {
		t.Errorf("failures = %q, want one for the unknown flag", r.failures)
	}
}
