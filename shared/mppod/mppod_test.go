package mppod_test

import (
	"os"
	"path/filepath"
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

func TestSourceDir(t *testing.T) {
	got := mppod.SourceDir("/var/lib/kubelet", "mp-abc")
	want := "/var/lib/kubelet/plugins/s3.csi.scality.com/mnt/mp-abc"
	if got != want {
		t.Fatalf("SourceDir() = %q, want %q", got, want)
	}
}

func TestSourceNames(t *testing.T) {
	kubelet := t.TempDir()
	if names, err := mppod.SourceNames(kubelet); err != nil || len(names) != 0 {
		t.Fatalf("SourceNames before the plugin dir exists = %v, %v; want none", names, err)
	}
	for _, name := range []string{"mp-a", "mp-b"} {
		if err := os.MkdirAll(mppod.SourceDir(kubelet, name), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(mppod.SourceDir(kubelet, "x")), "stray-file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	names, err := mppod.SourceNames(kubelet)
	if err != nil || strings.Join(names, ",") != "mp-a,mp-b" {
		t.Fatalf("SourceNames = %v, %v; want the two source dirs only", names, err)
	}
}
