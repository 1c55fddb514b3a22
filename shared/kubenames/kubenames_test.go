package kubenames_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/kubenames"
)

func TestValidators(t *testing.T) {
	uid := "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11"
	tests := []struct {
		name  string
		check func(string) error
		in    string
		ok    bool
	}{
		{"a node name with dots is valid", kubenames.Node, "node-a.example.com", true},
		{"a node name with a slash is invalid", kubenames.Node, "node/../x", false},
		{"a node name of dot-dot is invalid", kubenames.Node, "..", false},
		{"an uppercase node name is invalid", kubenames.Node, "Node-A", false},
		{"an empty node name is invalid", kubenames.Node, "", false},
		{"a node name of 254 characters is invalid", kubenames.Node, strings.Repeat("a", 254), false},
		{"a PV name is valid", kubenames.PV, "pvc-0c2f6e3c", true},
		{"a PV name with a traversal is invalid", kubenames.PV, "../../etc", false},
		{"a pod name is valid", kubenames.Pod, "web-0", true},
		{"a pod name with a NUL byte is invalid", kubenames.Pod, "web\x000", false},
		{"an attachment name is valid", kubenames.Object, "s3pa-x7k2q", true},
		{"a namespace is valid", kubenames.Namespace, "mount-s3", true},
		{"a namespace with a dot is invalid", kubenames.Namespace, "kube.system", false},
		{"a namespace of 64 characters is invalid", kubenames.Namespace, strings.Repeat("a", 64), false},
		{"a UID is valid", kubenames.UID, uid, true},
		{"an uppercase UID is invalid", kubenames.UID, strings.ToUpper(uid), false},
		{"a UID in braces is invalid", kubenames.UID, "{" + uid + "}", false},
		{"a UID with a traversal is invalid", kubenames.UID, "../" + uid, false},
		{"a UID without dashes is invalid", kubenames.UID, strings.ReplaceAll(uid, "-", ""), false},
		{"an empty UID is invalid", kubenames.UID, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("check(%q) = %v, want ok=%v", tt.in, err, tt.ok)
			}
			if err != nil && !errors.Is(err, kubenames.ErrInvalid) {
				t.Fatalf("check(%q) = %v, want it to wrap ErrInvalid", tt.in, err)
			}
		})
	}
}
