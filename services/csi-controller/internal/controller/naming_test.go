package controller

import (
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/volumecontext"
)

func TestBucketName(t *testing.T) {
	tests := []struct {
		name       string
		prefix     string
		volume     string
		wantPrefix string
	}{
		{"a provisioner name keeps its readable part", "csi-s3-", "pvc-3f1c2a5e-8a8b-4f0e-9d43-0c1f8d8b6a11", "csi-s3-pvc-3f1c2a5e-8a8b-4f0e-9d43-0c1f8d8b6a11-"},
		{"capitals and underscores are mapped into the bucket alphabet", "csi-s3-", "My_Volume..Name", "csi-s3-my-volume-name-"},
		{"a name of 128 characters is truncated to fit", "csi-s3-", strings.Repeat("a", 128), "csi-s3-aaaa"},
		{"a name without any usable character still gets a bucket", "csi-s3-", "___", "csi-s3-"},
		{"an empty prefix is allowed", "", "pvc-1", "pvc-1-"},
		{"a reserved prefix produced by the name is avoided", "", "sthree-x", "vthree-x-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BucketName(tt.prefix, tt.volume)
			if err := volumecontext.ValidateBucketName(got); err != nil {
				t.Errorf("BucketName() = %q, invalid: %v", got, err)
			}
			if !strings.HasPrefix(got, tt.wantPrefix) {
				t.Errorf("BucketName() = %q, want prefix %q", got, tt.wantPrefix)
			}
			if again := BucketName(tt.prefix, tt.volume); again != got {
				t.Errorf("BucketName() is not stable: %q then %q", got, again)
			}
		})
	}
}

func TestBucketNamesOfNamesWithTheSameSlugDiffer(t *testing.T) {
	a, b := BucketName("p-", "PVC_1"), BucketName("p-", "pvc-1")
	if a == b {
		t.Errorf("BucketName(PVC_1) = BucketName(pvc-1) = %q", a)
	}
	long1, long2 := BucketName("p-", strings.Repeat("x", 100)+"1"), BucketName("p-", strings.Repeat("x", 100)+"2")
	if long1 == long2 {
		t.Errorf("two long names that differ past the truncation share bucket %q", long1)
	}
}

// FuzzBucketName checks that every request name gives a valid bucket name.
func FuzzBucketName(f *testing.F) {
	f.Add("csi-s3-", "pvc-1")
	f.Add("", "---")
	f.Add("a", "xn--\u00e9")
	f.Fuzz(func(t *testing.T, prefix, name string) {
		if len(prefix) > 24 || strings.Trim(prefix, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || strings.HasPrefix(prefix, "-") ||
			strings.HasPrefix(prefix, "xn--") || strings.HasPrefix(prefix, "sthree-") || strings.HasPrefix(prefix, "amzn-s3-demo-") {
			return // options.Validate refuses such a prefix
		}
		if got := BucketName(prefix, name); volumecontext.ValidateBucketName(got) != nil {
			t.Fatalf("BucketName(%q, %q) = %q: %v", prefix, name, got, volumecontext.ValidateBucketName(got))
		}
	})
}

func TestParseParams(t *testing.T) {
	tests := []struct {
		name    string
		params  map[string]string
		wantErr string
		check   func(t *testing.T, p Params)
	}{
		{name: "no parameters keep the bucket on delete", params: nil, check: func(t *testing.T, p Params) {
			if p.EmptyBucketOnDelete || len(p.PassThrough) != 0 {
				t.Errorf("Params = %+v", p)
			}
		}},
		{name: "the provisioner's csi.storage.k8s.io keys are accepted and unused", params: map[string]string{
			"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/provisioner-secret-name": "s",
		}, check: func(t *testing.T, p Params) {
			if len(p.PassThrough) != 0 {
				t.Errorf("PassThrough = %v, want none", p.PassThrough)
			}
		}},
		{name: "mount settings pass through", params: map[string]string{
			"mountpointPodServiceAccountName": "sa", "mountpointContainerResourcesRequestsCpu": "100m", "emptyBucketOnDelete": "true",
		}, check: func(t *testing.T, p Params) {
			if !p.EmptyBucketOnDelete || p.PassThrough["mountpointPodServiceAccountName"] != "sa" || p.PassThrough["mountpointContainerResourcesRequestsCpu"] != "100m" {
				t.Errorf("Params = %+v", p)
			}
		}},
		{name: "every unknown key is reported", params: map[string]string{"bucketName": "x", "foo": "y"}, wantErr: "foo"},
		{name: "the bucket name cannot be chosen by a StorageClass", params: map[string]string{"bucketName": "x"}, wantErr: "bucketName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseParams(tt.params)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseParams() = %v, want an error naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseParams() = %v", err)
			}
			tt.check(t, p)
		})
	}
}

func TestFingerprintChangesWithEveryParameter(t *testing.T) {
	base := fingerprint(Params{PassThrough: map[string]string{"a": "b"}}, "driver")
	for name, other := range map[string]string{
		"auth source":     fingerprint(Params{PassThrough: map[string]string{"a": "b"}}, "secret"),
		"empty on delete": fingerprint(Params{EmptyBucketOnDelete: true, PassThrough: map[string]string{"a": "b"}}, "driver"),
		"pass-through":    fingerprint(Params{PassThrough: map[string]string{"a": "c"}}, "driver"),
	} {
		if other == base {
			t.Errorf("fingerprint ignores the %s", name)
		}
	}
}
