package kubenames_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/kubenames"
)

// FuzzNames: every name a validator accepts is one path element that stays where it is joined.
func FuzzNames(f *testing.F) {
	for _, s := range []string{
		"node-a.example.com", "web-0", "mount-s3", "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11",
		"", ".", "..", "../..", "a/b", "a/../..", "/etc", "a\x00b", "a..b", ".a", "a.", "a\n",
		"0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a1/", "%2e%2e",
	} {
		f.Add(s)
	}
	checks := map[string]func(string) error{
		"node": kubenames.Node, "pv": kubenames.PV, "pod": kubenames.Pod, "object": kubenames.Object,
		"namespace": kubenames.Namespace, "uid": kubenames.UID,
	}
	f.Fuzz(func(t *testing.T, s string) {
		for what, check := range checks {
			if check(s) != nil {
				continue
			}
			if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00\\") || len(s) > 253 {
				t.Fatalf("%s validator accepted %q", what, s)
			}
			if got := filepath.Join("/base", s); filepath.Dir(got) != "/base" || filepath.Base(got) != s {
				t.Fatalf("%s validator accepted %q, which does not join as one element: %q", what, s, got)
			}
		}
	})
}
