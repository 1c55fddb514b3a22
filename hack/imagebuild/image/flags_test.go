package image

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parseSpec(t *testing.T, args ...string) (*Spec, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	spec := AddSpecFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return spec()
}

func TestSpecFlags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := []string{"-ref", "docker.io/s3csi/x:1", "-file", "/x=" + bin, "-entrypoint", "/x"}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(*Spec) bool
	}{
		{"a sticky dir mode", []string{"-created", "2025-01-01T00:00:00Z", "-dir", "/tmp=1777"}, "",
			func(s *Spec) bool { return s.Dirs[0].Mode == os.ModeSticky|0o777 }},
		{"labels and user", []string{"-created", "2025-01-01T00:00:00+02:00", "-label", "a=b=c", "-user", "65534"}, "",
			func(s *Spec) bool { return s.Labels["a"] == "b=c" && s.UID == 65534 }},
		{"no creation time", nil, "-created is required", nil},
		{"a mode that is not octal", []string{"-created", "2025-01-01T00:00:00Z", "-dir", "/tmp=999"}, "not an octal mode", nil},
		{"a label without =", []string{"-created", "2025-01-01T00:00:00Z", "-label", "x"}, "want KEY=VALUE", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseSpec(t, append(append([]string{}, base...), tc.args...)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("spec = %+v", s)
			}
		})
	}
}
