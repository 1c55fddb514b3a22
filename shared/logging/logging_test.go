package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr []string
	}{
		{name: "the defaults are valid", opts: NewOptions()},
		{name: "text format at trace is valid", opts: Options{Format: FormatText, Verbosity: Trace}},
		{name: "an unknown format is rejected", opts: Options{Format: "logfmt"}, wantErr: []string{"--log-format"}},
		{name: "a negative verbosity is rejected", opts: Options{Format: FormatJSON, Verbosity: -1}, wantErr: []string{"--log-level"}},
		{name: "a verbosity past the maximum is rejected", opts: Options{Format: FormatJSON, Verbosity: 11}, wantErr: []string{"--log-level"}},
		{
			name:    "every invalid option is reported at once",
			opts:    Options{Format: "xml", Verbosity: 99},
			wantErr: []string{"--log-format", "--log-level"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error mentioning %q", tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %v, want it to mention %q", err, want)
				}
			}
		})
	}
}

func TestAddFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want Options
	}{
		{name: "no flags keeps the defaults", want: Options{Format: FormatJSON, Verbosity: Info}},
		{name: "long flags set format and level", args: []string{"--log-format=text", "--log-level=4"}, want: Options{Format: FormatText, Verbosity: Trace}},
		{name: "the -v shorthand sets the level", args: []string{"-v", "1"}, want: Options{Format: FormatJSON, Verbosity: Debug}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatalf("parse flags: %v", err)
			}
			if o != tt.want {
				t.Errorf("options = %+v, want %+v", o, tt.want)
			}
		})
	}
}

func TestNewHonoursVerbosityAndFormat(t *testing.T) {
	tests := []struct {
		name      string
		opts      Options
		wantDebug bool
	}{
		{name: "info drops debug lines", opts: Options{Format: FormatJSON, Verbosity: Info}},
		{name: "debug writes debug lines", opts: Options{Format: FormatJSON, Verbosity: Debug}, wantDebug: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := New(tt.opts, &buf)
			log.Info("info line", "pod", "default/a")
			log.V(Debug).Info("debug line")

			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			var first map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
				t.Fatalf("first line %q is not JSON: %v", lines[0], err)
			}
			if first["msg"] != "info line" || first["pod"] != "default/a" {
				t.Errorf("first line = %v, want msg and pod keys", first)
			}
			if ts, _ := first["ts"].(string); !isRFC3339(ts) {
				t.Errorf("timestamp = %v, want RFC 3339", first["ts"])
			}
			if got := strings.Contains(buf.String(), "debug line"); got != tt.wantDebug {
				t.Errorf("debug line written = %v, want %v; output:\n%s", got, tt.wantDebug, buf.String())
			}
		})
	}
}

func TestNewTextFormatIsNotJSON(t *testing.T) {
	var buf bytes.Buffer
	New(Options{Format: FormatText}, &buf).Info("hello", "node", "n1")
	out := buf.String()
	if json.Valid([]byte(strings.TrimSpace(out))) || !strings.Contains(out, "hello") {
		t.Errorf("text output = %q, want a non-JSON line containing the message", out)
	}
}

func isRFC3339(s string) bool {
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}
