package mountopts

import (
	"slices"
	"strings"
	"testing"
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
		{name: "a cache escaping its volume is refused", entries: []string{"cache=.."}, wantErr: "want a cache name"},
		{name: "a cache path with spaces is refused", entries: []string{"cache /tmp/a b"}, wantErr: "want a cache name"},
		{name: "a log directory is refused, also in its short form", entries: []string{"-l /var/log"}, wantErr: "logs go to the Mountpoint Pod's output"},
		{name: "an unknown flag is refused", entries: []string{"--allow-everything"}, wantErr: "unknown"},
		{name: "a value smuggling a second option is refused", entries: []string{"region=us-east-1 --endpoint-url=x"}, wantErr: "not allowed"},
		{name: "a prefix smuggling an option is refused", entries: []string{"prefix=a/ --profile=b/"}, wantErr: "prefix"},
		{name: "a flag with a value is refused", entries: []string{"allow-delete=yes"}, wantErr: "takes no value"},
		{name: "a value option without a value is refused", entries: []string{"uid"}, wantErr: "needs a value"},
		{name: "a mode that is not octal is refused", entries: []string{"dir-mode=999"}, wantErr: "octal"},
		{name: "a part size the mounter refuses is refused", entries: []string{"part-size=1"}, wantErr: "want an integer from 5242880 to 5368709120"},
		{name: "an encryption the mounter does not know is refused", entries: []string{"sse=rot13"}, wantErr: "want one of AES256, aws:kms, aws:kms:dsse"},
		{name: "a prefix starting with a slash is refused", entries: []string{"prefix=/a/"}, wantErr: "leading '-' or '/'"},
		{name: "allow-other and allow-root together are refused", entries: []string{"allow-other", "allow-root"}, wantErr: "exclude each other"},
		{name: "a KMS key without KMS encryption is refused", entries: []string{"sse-kms-key-id=k"}, wantErr: "needs sse aws:kms"},
		{name: "a cache size without a cache is refused", entries: []string{"max-cache-size=10"}, wantErr: "needs cache"},
		{name: "crc64nvme after another checksum leaves the default", entries: []string{"upload-checksums=off", "upload-checksums crc64nvme"}, want: []string{}},
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

// Without an fsGroup or a gid the files' group is 0, as under the Scality driver: a workload
// moved from it keeps the group ownership it saw.
func TestWithoutAGroupTheFilesGroupIsTheScalityDrivers(t *testing.T) {
	o, _ := Parse([]string{"--file-mode=640"})
	if err := o.ApplyVolumeMountGroup(""); err != nil {
		t.Fatal(err)
	}
	if want := []string{"--file-mode=640", "--gid=0"}; !slices.Equal(o.Args(), want) {
		t.Fatalf("args = %q, want %q", o.Args(), want)
	}
	o, _ = Parse([]string{"--gid=5"})
	_ = o.ApplyVolumeMountGroup("")
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
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if s := byName[name]; s == nil || s.verdict != Works || s.name != name || strings.ContainsAny(a, " \t\n,") {
				t.Fatalf("accepted %q rendered as %q", entry, a)
			}
		}
		// What the node-agent sends, the mounter accepts.
		o.ApplyDefaults(false)
		if err := CheckArgs(o.Args()); err != nil {
			t.Fatalf("accepted %q, but its arguments %q are refused: %v", entry, o.Args(), err)
		}
	})
}

// allAllowed sets every allowed option, as a volume's mount options may.
var allAllowed = []string{
	"allow-delete", "allow-overwrite", "allow-other", "requester-pays", "debug", "abort-on-signal",
	"no-sign-request", "uid=1000", "gid=2000", "dir-mode=750", "file-mode=640", "prefix=data/",
	"region=eu-west-1", "metadata-ttl=indefinite", "negative-metadata-ttl=60", "max-threads=16",
	"part-size=8388608", "read-part-size=8388608", "write-part-size=8388608", "max-cache-size=1024",
	"max-memory-target=512", "memory-target=256", "sse=aws:kms", "sse-kms-key-id=key-1",
	"upload-checksums=off", "expected-bucket-owner=123456789012", "cache=data",
}

func TestCheckArgsAcceptsEverythingTheNodeAgentSends(t *testing.T) {
	for _, tt := range []struct {
		name    string
		entries []string
		group   string
		ro      bool
	}{
		{name: "no options"},
		{name: "no options, read-only", ro: true},
		{name: "no options, with a volume mount group", group: "3000"},
		{name: "every allowed option", entries: allAllowed},
		{name: "every allowed option, read-only, with a volume mount group", entries: allAllowed, group: "3000", ro: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Parse(tt.entries)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.ApplyVolumeMountGroup(tt.group); err != nil {
				t.Fatal(err)
			}
			o.ApplyDefaults(tt.ro)
			if err := CheckArgs(o.Args()); err != nil {
				t.Fatalf("CheckArgs(%q) = %v", o.Args(), err)
			}
		})
	}
}

func TestCheckArgsRefusesWhatThePolicyRefuses(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "the endpoint cannot be redirected", args: []string{"--endpoint-url=http://evil.example"},
			wantErr: `mount option "--endpoint-url=http://evil.example" is not allowed: the endpoint is set by the driver's configuration`},
		{name: "a profile cannot be chosen", args: []string{"--read-only", "--profile=x"},
			wantErr: `mount option "--profile=x" is not allowed: credentials are provided by the driver`},
		{name: "a CA bundle cannot be chosen, and the chart value that gives one is named", args: []string{"--ca-bundle=/etc/evil.pem"},
			wantErr: "the S3 endpoint's CA is the driver's: set it with the chart value `s3.caBundle`"},
		{name: "a log directory cannot be chosen", args: []string{"--log-directory=/host"}, wantErr: "logs go to the Mountpoint Pod's output"},
		{name: "an unknown option is refused", args: []string{"--allow-everything"}, wantErr: "unknown or not allowed"},
		{name: "a value in the next argument is refused", args: []string{"--cache", "data"}, wantErr: `"--cache" needs a value`},
		{name: "a bare word is refused", args: []string{"bucket"}, wantErr: "not of the form --name"},
		{name: "a single-dash option is refused", args: []string{"-o", "allow_other"}, wantErr: "not of the form --name"},
		{name: "a value smuggling a second option is refused", args: []string{"--region=us-east-1 --endpoint-url=x"}, wantErr: "characters"},
		{name: "a cache path is refused", args: []string{"--cache=/var/lib"}, wantErr: "not a path"},
		{name: "an option given twice is refused", args: []string{"--uid=1", "--uid=0"}, wantErr: "given twice"},
		{name: "an option the node-agent drops is refused", args: []string{"--debug-crt"}, wantErr: `"--debug-crt" is not allowed: the node-agent drops it`},
		{name: "a value the node-agent changes is refused", args: []string{"--upload-checksums=crc64nvme"}, wantErr: "the node-agent never sends this value"},
		{name: "an alias is refused", args: []string{"--d"}, wantErr: "not in canonical form: want --debug"},
		{name: "every refused argument is named", args: []string{"--profile=x", "--endpoint-url=y"}, wantErr: "--endpoint-url=y"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckArgs(tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckArgs(%q) = %v, want an error containing %q", tt.args, err, tt.wantErr)
			}
		})
	}
}

func TestCheckEnv(t *testing.T) {
	for _, tt := range []struct {
		name    string
		env     []string
		wantErr string
	}{
		{name: "what the node-agent sends is accepted", env: []string{"AWS_PROFILE=s3csi", "AWS_REGION=us-east-1", "AWS_ENDPOINT_URL=https://ring.example"}},
		{name: "no environment is accepted"},
		{name: "an unknown name is refused", env: []string{"AWS_PROFILE=s3csi", "AWS_CA_BUNDLE=/evil.pem"},
			wantErr: `environment variable "AWS_CA_BUNDLE" is not allowed: only AWS_ENDPOINT_URL, AWS_PROFILE, AWS_REGION are accepted`},
		{name: "keys are refused", env: []string{"AWS_SECRET_ACCESS_KEY=x"}, wantErr: `"AWS_SECRET_ACCESS_KEY" is not allowed`},
		{name: "an entry without a value is refused", env: []string{"AWS_REGION"}, wantErr: "not of the form NAME=value"},
		{name: "names are case-sensitive", env: []string{"aws_profile=x"}, wantErr: `"aws_profile" is not allowed`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckEnv(tt.env)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckEnv(%q) = %v", tt.env, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckEnv(%q) = %v, want an error containing %q", tt.env, err, tt.wantErr)
			}
		})
	}
}

func FuzzCheckArgs(f *testing.F) {
	f.Add("--prefix=a/")
	f.Add("--endpoint-url=http://evil.example")
	f.Fuzz(func(t *testing.T, arg string) {
		if CheckArgs([]string{arg}) != nil {
			return
		}
		// An accepted argument is one the policy accepts too, rendered the same.
		o, err := Parse([]string{arg})
		if err != nil {
			t.Fatalf("CheckArgs accepts %q, Parse refuses it: %v", arg, err)
		}
		if got := o.Args(); !slices.Equal(got, []string{arg}) {
			t.Fatalf("CheckArgs accepts %q, the policy renders it as %q", arg, got)
		}
	})
}
