package mppod_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/mppod"
)

func TestName(t *testing.T) {
	tests := []struct {
		name, uid, pv, want string
	}{ // want computed with coreutils: printf %s "$uid$pv" | sha224sum
		{
			name: "the name is mp- and the hex sha224 of the pod UID and the PV name",
			uid:  "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11", pv: "s3-pv",
			want: "mp-8e132d46ba9cac50eb8bfaf954f50c2d5ad1a4f7fb9032c87e2e38f7",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mppod.Name(tt.uid, tt.pv); got != tt.want {
				t.Fatalf("Name(%q, %q) = %q, want %q", tt.uid, tt.pv, got, tt.want)
			}
		})
	}
	if mppod.Name("a", "b") == mppod.Name("b", "a") {
		t.Fatal("Name() must depend on which value is the UID and which the PV")
	}
}

// validName is a well-formed Mountpoint Pod name.
var validName = mppod.Name("0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11", "s3-pv")

func TestValidateName(t *testing.T) {
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"a name made by Name is valid", validName, true},
		{"another name made by Name is valid", mppod.Name("a", "b"), true},
		{"an empty name is invalid", "", false},
		{"a name without the mp- prefix is invalid", strings.TrimPrefix(validName, "mp-"), false},
		{"a name one digit short is invalid", validName[:len(validName)-1], false},
		{"a name one digit long is invalid", validName + "0", false},
		{"uppercase hex is invalid", strings.ToUpper(validName[:3]) + strings.ToUpper(validName[3:]), false},
		{"a non-hex letter is invalid", validName[:len(validName)-1] + "g", false},
		{"a traversal is invalid", "../../../pods/0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11/volumes", false},
		{"a traversal after the prefix is invalid", "mp-/../../../../../../../../../../../../../../etc/passwd00", false},
		{"a slash is invalid", validName[:10] + "/" + validName[11:], false},
		{"a dot-dot is invalid", "..", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := mppod.ValidateName(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateName(%q) = %v, want ok=%v", tt.in, err, tt.ok)
			}
			if err != nil && !errors.Is(err, mppod.ErrInvalidName) {
				t.Fatalf("ValidateName(%q) = %v, want it to wrap ErrInvalidName", tt.in, err)
			}
		})
	}
}

func TestSourceDir(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"a valid name is joined under the plugin's mnt dir", validName, "/var/lib/kubelet/plugins/s3.csi.scality.com/mnt/" + validName},
		{"a traversal to another pod's dirs is refused", "../../../pods/0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11/volumes", ""},
		{"an absolute path is refused", "/etc", ""},
		{"the mnt dir itself is refused", ".", ""},
		{"an empty name is refused", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mppod.SourceDir("/var/lib/kubelet", tt.in)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("SourceDir(%q) = %q, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("SourceDir(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestBeneath(t *testing.T) {
	tests := []struct {
		name  string
		base  string
		elems []string
		want  string
	}{
		{"plain elements stay under the base", "/a/b", []string{"c", "d"}, "/a/b/c/d"},
		{"no element is the base itself", "/a/b", nil, "/a/b"},
		{"an unclean base is cleaned", "/a//b/", []string{"c"}, "/a/b/c"},
		{"dot-dot inside the base is allowed", "/a/b", []string{"c/../d"}, "/a/b/d"},
		{"dot-dot out of the base is refused", "/a/b", []string{"../c"}, ""},
		{"dot-dot out through several elements is refused", "/a/b", []string{"c", "..", ".."}, ""},
		{"a sibling with the base as prefix is refused", "/a/b", []string{"../bc"}, ""},
		{"an absolute element stays under the base", "/a/b", []string{"/etc/passwd"}, "/a/b/etc/passwd"},
		{"a NUL byte is refused", "/a/b", []string{"c\x00d"}, ""},
		{"a NUL byte in the base is refused", "\x00", []string{"0"}, ""},
		{"a relative base works the same", "a", []string{"../../x"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mppod.Beneath(tt.base, tt.elems...)
			if tt.want == "" {
				if err == nil || !errors.Is(err, mppod.ErrOutsideBase) {
					t.Fatalf("Beneath(%q, %q) = %q, %v; want ErrOutsideBase", tt.base, tt.elems, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Beneath(%q, %q) = %q, %v; want %q", tt.base, tt.elems, got, err, tt.want)
			}
		})
	}
}

func TestSourceNames(t *testing.T) {
	kubelet := t.TempDir()
	if names, err := mppod.SourceNames(kubelet); err != nil || len(names) != 0 {
		t.Fatalf("SourceNames before the plugin dir exists = %v, %v; want none", names, err)
	}
	a, b := mppod.Name("uid-a", "pv"), mppod.Name("uid-b", "pv")
	for _, name := range []string{a, b} {
		dir, err := mppod.SourceDir(kubelet, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	mnt := mppod.SourcesDir(kubelet)
	if err := os.WriteFile(filepath.Join(mnt, "stray-file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "not-a-mountpoint-pod"), 0o750); err != nil {
		t.Fatal(err)
	}
	names, err := mppod.SourceNames(kubelet)
	want := []string{a, b}
	slices.Sort(want)
	if err != nil || !slices.Equal(names, want) {
		t.Fatalf("SourceNames = %v, %v; want the two source dirs only", names, err)
	}
}

// The mounter links this package: what it imports ends up in every Mountpoint Pod. The pod
// check, which needs k8s.io/api (3 MB more mounter binary), lives in mppodcheck.
func TestMppodImportsNoKubernetesPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") {
			t.Errorf("mppod imports %s; keep Kubernetes types in mppodcheck", dep)
		}
	}
}
