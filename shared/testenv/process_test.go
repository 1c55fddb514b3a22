package testenv_test

import (
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/testenv"
)

func TestRunToExit(t *testing.T) {
	tests := []struct {
		name     string
		env      []string
		script   string
		wantCode int
		wantOut  string
	}{
		{name: "a clean exit is code 0 with its output", script: "echo ready", wantCode: 0, wantOut: "ready"},
		{name: "a failing exit gives its code and stderr", script: "echo bad flag >&2; exit 2", wantCode: 2, wantOut: "bad flag"},
		{name: "the extra environment overrides the test's", env: []string{"HOME=/elsewhere"}, script: "echo $HOME", wantOut: "/elsewhere"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := testenv.RunToExit(t, "/bin/sh", tt.env, "-c", tt.script)
			if code != tt.wantCode || !strings.Contains(out, tt.wantOut) {
				t.Errorf("RunToExit = %d, %q; want %d and output containing %q", code, out, tt.wantCode, tt.wantOut)
			}
		})
	}
}
