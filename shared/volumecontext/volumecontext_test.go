package volumecontext_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/volumecontext"
)

func TestParseAcceptsScalityV2Contexts(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]string
		want volumecontext.Context
	}{
		{
			name: "a static volume with only a bucket uses the driver's credentials",
			in:   map[string]string{"bucketName": "my-bucket"},
			want: volumecontext.Context{BucketName: "my-bucket", AuthenticationSource: "driver"},
		},
		{
			name: "a dynamic volume with a provisioner secret uses the secret",
			in:   map[string]string{"bucketName": "csi-s3-abc", "authenticationSource": "secret", "dynamicProvisioning": "true"},
			want: volumecontext.Context{BucketName: "csi-s3-abc", AuthenticationSource: "secret", DynamicProvisioning: true},
		},
		{
			name: "podInfoOnMount keys are parsed and unknown keys are listed, not refused",
			in: map[string]string{
				"bucketName": "b-1", "csi.storage.k8s.io/pod.uid": "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11", "csi.storage.k8s.io/pod.name": "p",
				"csi.storage.k8s.io/pod.namespace": "ns", "csi.storage.k8s.io/serviceAccount.name": "sa", "zz": "1", "aa": "2",
			},
			want: volumecontext.Context{
				BucketName: "b-1", AuthenticationSource: "driver", PodUID: "0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11", PodName: "p", PodNamespace: "ns",
				ServiceAccountName: "sa", Ignored: []string{"aa", "zz"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := volumecontext.Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse() = %v", err)
			}
			if got.BucketName != tt.want.BucketName || got.AuthenticationSource != tt.want.AuthenticationSource ||
				got.DynamicProvisioning != tt.want.DynamicProvisioning || got.PodUID != tt.want.PodUID ||
				got.PodName != tt.want.PodName || got.PodNamespace != tt.want.PodNamespace ||
				got.ServiceAccountName != tt.want.ServiceAccountName || strings.Join(got.Ignored, ",") != strings.Join(tt.want.Ignored, ",") {
				t.Errorf("Parse() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseRefusesBadContextsNamingTheKey(t *testing.T) {
	tests := []struct {
		name    string
		in      map[string]string
		wantKey string
	}{
		{"a missing bucket name", map[string]string{}, "bucketName"},
		{"an invalid bucket name", map[string]string{"bucketName": "My_Bucket"}, "bucketName"},
		{"an unknown authentication source", map[string]string{"bucketName": "abc", "authenticationSource": "pod"}, "authenticationSource"},
		{"a bad resource quantity", map[string]string{"bucketName": "abc", "mountpointContainerResourcesLimitsMemory": "lots"}, "mountpointContainerResourcesLimitsMemory"},
		{"a negative resource quantity", map[string]string{"bucketName": "abc", "mountpointContainerResourcesRequestsCpu": "-1"}, "mountpointContainerResourcesRequestsCpu"},
		{"a bad service account name", map[string]string{"bucketName": "abc", "mountpointPodServiceAccountName": "Not Valid"}, "mountpointPodServiceAccountName"},
		{"a pod UID that is a traversal", map[string]string{"bucketName": "abc", "csi.storage.k8s.io/pod.uid": "../../etc"}, "csi.storage.k8s.io/pod.uid"},
		{"a pod name with a slash", map[string]string{"bucketName": "abc", "csi.storage.k8s.io/pod.name": "web/../0"}, "csi.storage.k8s.io/pod.name"},
		{"a pod namespace that is not a DNS label", map[string]string{"bucketName": "abc", "csi.storage.k8s.io/pod.namespace": ".."}, "csi.storage.k8s.io/pod.namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := volumecontext.Parse(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.wantKey) {
				t.Errorf("Parse() = %v, want an error naming %q", err, tt.wantKey)
			}
		})
	}
}

func TestMapRoundTripsThroughParse(t *testing.T) {
	in := map[string]string{
		"bucketName": "csi-s3-pvc-1-abcd", "authenticationSource": "secret", "dynamicProvisioning": "true",
		"mountpointPodServiceAccountName": "mp-sa", "mountpointContainerResourcesLimitsMemory": "256Mi",
	}
	c, err := volumecontext.Parse(in)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	if got := c.Map(); !maps.Equal(got, in) {
		t.Errorf("Map() = %v, want %v", got, in)
	}
}

func TestValidateBucketName(t *testing.T) {
	tests := []struct {
		name   string
		bucket string
		valid  bool
	}{
		{"a plain name is valid", "my-bucket-01", true},
		{"a dotted name is valid", "my.bucket", true},
		{"a name of 63 characters is valid", strings.Repeat("a", 63), true},
		{"a name of 64 characters is invalid", strings.Repeat("a", 64), false},
		{"a name of 2 characters is invalid", "ab", false},
		{"capitals are invalid", "MyBucket", false},
		{"underscores are invalid", "my_bucket", false},
		{"a leading hyphen is invalid", "-bucket", false},
		{"a trailing hyphen is invalid", "bucket-", false},
		{"adjacent periods are invalid", "a..b", false},
		{"an IP address is invalid", "192.168.1.1", false},
		{"the xn-- prefix is reserved", "xn--bucket", false},
		{"the -s3alias suffix is reserved", "bucket-s3alias", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := volumecontext.ValidateBucketName(tt.bucket); (err == nil) != tt.valid {
				t.Errorf("ValidateBucketName(%q) = %v, want valid=%v", tt.bucket, err, tt.valid)
			}
		})
	}
}

// FuzzParse checks that no volume context makes Parse panic, and that what it accepts
// survives Map and Parse again unchanged.
func FuzzParse(f *testing.F) {
	f.Add("bucketName", "my-bucket", "authenticationSource", "secret")
	f.Add("bucketName", "a..b", "mountpointContainerResourcesLimitsCpu", "1e3")
	f.Add("bucketName", "b", "csi.storage.k8s.io/pod.uid", "../../../etc")
	f.Add("csi.storage.k8s.io/pod.name", "..", "csi.storage.k8s.io/pod.namespace", "a/b")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		c, err := volumecontext.Parse(map[string]string{k1: v1, k2: v2})
		if err != nil {
			return
		}
		for _, name := range []string{c.PodName, c.PodNamespace, c.PodUID} {
			if name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
				t.Fatalf("Parse accepted %q as a pod name, namespace or UID", name)
			}
		}
		again, err := volumecontext.Parse(c.Map())
		if err != nil {
			t.Fatalf("Parse(Map()) = %v for %+v", err, c)
		}
		if !maps.Equal(again.Map(), c.Map()) {
			t.Fatalf("Map() changed: %v then %v", c.Map(), again.Map())
		}
	})
}
