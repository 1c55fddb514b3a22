package mppod_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/mppod"
)

// traversals are names an attacker could put in an event, a volume context or an object.
var traversals = []string{
	"", ".", "..", "../", "/", "//", "mp-", "mp-..", "mp-../..", "../../../pods/uid/volumes",
	"mp-/../../../../etc/passwd", "./mp-abc", "mp-abc/..", "a/../../b", "\x00", "mp-\x00",
	"..\\..\\windows", "%2e%2e/%2e%2e", "mp-abc\n", " mp-abc", "/etc/shadow",
}

// FuzzValidateName: whatever ValidateName accepts is one clean path element of the fixed shape,
// and SourceDir of it is a direct child of the sources dir.
func FuzzValidateName(f *testing.F) {
	f.Add(validName)
	f.Add(mppod.Name("a", "b"))
	for _, s := range traversals {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		dir, err := mppod.SourceDir("/var/lib/kubelet", name)
		if mppod.ValidateName(name) != nil {
			if err == nil {
				t.Fatalf("SourceDir(%q) = %q for a name ValidateName refuses", name, dir)
			}
			return
		}
		if len(name) != len(validName) || !strings.HasPrefix(name, "mp-") || strings.ContainsAny(name, "/.\x00") {
			t.Fatalf("ValidateName accepted %q", name)
		}
		if err != nil || filepath.Dir(dir) != mppod.SourcesDir("/var/lib/kubelet") || filepath.Base(dir) != name {
			t.Fatalf("SourceDir(%q) = %q, %v; want a direct child of the sources dir", name, dir, err)
		}
	})
}

// FuzzBeneath: whatever Beneath returns is the base or under it, lexically and after cleaning.
func FuzzBeneath(f *testing.F) {
	for _, s := range traversals {
		f.Add("/var/lib/kubelet/pods", s, "comm")
		f.Add("base", s, s)
	}
	f.Fuzz(func(t *testing.T, base, a, b string) {
		if base == "" {
			return
		}
		got, err := mppod.Beneath(base, a, b)
		if err != nil {
			return
		}
		clean := filepath.Clean(base)
		if got != filepath.Clean(got) {
			t.Fatalf("Beneath(%q, %q, %q) = %q, not clean", base, a, b, got)
		}
		if strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("Beneath(%q, %q, %q) = %q holds a NUL byte", base, a, b, got)
		}
		rel, rerr := filepath.Rel(clean, got)
		if rerr != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("Beneath(%q, %q, %q) = %q is outside %q", base, a, b, got, clean)
		}
		if got != clean && !strings.HasPrefix(got, strings.TrimSuffix(clean, "/")+"/") && clean != "." {
			t.Fatalf("Beneath(%q, %q, %q) = %q does not start with %q", base, a, b, got, clean)
		}
	})
}
