package mountopts

import (
	"slices"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/mountargs"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		entries []string
		want    []string
		wantErr string
	}{
		{name: "allowed flags and values in every accepted form are made canonical",
			entries: []string{"allow-delete", "--uid=1000", "gid 2000", "--prefix=a/b/", "--region us-east-1"},
			want:    []string{"--allow-delete", "--gid=2000", "--prefix=a/b/", "--region=us-east-1", "--uid=1000"}},
		{name: "the endpoint cannot be redirected", entries: []string{"--endpoint-url=http://evil"}, wantErr: "not allowed"},
		{name: "a profile cannot be chosen", entries: []string{"profile=x"}, wantErr: "not allowed"},
		{name: "raw FUSE options are refused", entries: []string{"-o", "allow_other"}, wantErr: "not allowed"},
		{name: "a cache on a host path is refused", entries: []string{"--cache=/var/lib"}, wantErr: "not a path"},
		{name: "a cache escaping its volume is refused", entries: []string{"cache=.."}, wantErr: "not a path"},
		{name: "an unknown flag is refused", entries: []string{"--allow-everything"}, wantErr: "unknown"},
		{name: "a value smuggling a second option is refused", entries: []string{"region=us-east-1 --endpoint-url=x"}, wantErr: "not allowed"},
		{name: "a prefix smuggling an option is refused", entries: []string{"prefix=a/ --profile=b/"}, wantErr: "prefix"},
		{name: "a flag with a value is refused", entries: []string{"allow-delete=yes"}, wantErr: "takes no value"},
		{name: "a value option without a value is refused", entries: []string{"uid"}, wantErr: "needs a value"},
		{name: "a mode that is not octal is refused", entries: []string{"dir-mode=999"}, wantErr: "octal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Parse(tt.entries)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := o.Args(); !slices.Equal(got, tt.want) {
				t.Fatalf("args = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVolumeMountGroupIsAppliedOnlyWithoutAnExplicitGid(t *testing.T) {
	o, _ := Parse([]string{"--file-mode=640"})
	if err := o.ApplyVolumeMountGroup("3000"); err != nil {
		t.Fatal(err)
	}
	want := []string{"--allow-other", "--dir-mode=770", "--file-mode=640", "--gid=3000"}
	if got := o.Args(); !slices.Equal(got, want) {
		t.Fatalf("args = %q, want %q", got, want)
	}
	o, _ = Parse([]string{"--gid=5"})
	_ = o.ApplyVolumeMountGroup("3000")
	if got := o.Args(); !slices.Equal(got, []string{"--gid=5"}) {
		t.Fatalf("explicit gid overridden: %q", got)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("prefix=a/")
	f.Add("--region us-east-1 --endpoint-url=x")
	f.Fuzz(func(t *testing.T, entry string) {
		o, err := Parse([]string{entry})
		if err != nil {
			return
		}
		for _, a := range o.Args() {
			if strings.ContainsAny(a, " \t\n,") || strings.Contains(a, "endpoint") || strings.Contains(a, "profile") {
				t.Fatalf("accepted %q rendered as %q", entry, a)
			}
		}
	})
}

func TestTheMounterParsesEveryOptionThePolicyLetsThrough(t *testing.T) {
	o, err := Parse([]string{
		"allow-delete", "allow-overwrite", "allow-other", "requester-pays", "debug", "abort-on-signal",
		"uid=1000", "gid=2000", "dir-mode=750", "file-mode=640", "prefix=data/", "region=eu-west-1",
		"metadata-ttl=indefinite", "negative-metadata-ttl=60", "max-threads=16", "part-size=8388608",
		"read-part-size=8388608", "write-part-size=8388608", "max-cache-size=1024", "max-memory-target=512", "memory-target=256",
		"sse=aws:kms", "sse-kms-key-id=key-1", "upload-checksums=off", "expected-bucket-owner=123456789012", "cache=data",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, readOnly := range []bool{false, true} {
		o.ApplyDefaults(readOnly)
		if _, err := mountargs.ParseMountOptions(o.Args()); err != nil {
			t.Fatalf("the mounter's parser refuses %q (read-only %t): %v", o.Args(), readOnly, err)
		}
	}
}
