package mountargs

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Options
		wantErr string
	}{
		{
			name: "a bare command line takes the bucket and the directory",
			args: []string{"bucket-1", "/mnt/s3"},
			want: Options{Bucket: "bucket-1", MountPoint: "/mnt/s3"},
		},
		{
			name: "values may follow an equals sign or come as the next argument",
			args: []string{"--region=eu-west-1", "--uid", "1000", "--prefix", "a/b/", "bucket-1", "/dev/fd/3"},
			want: Options{
				Bucket: "bucket-1", MountPoint: "/dev/fd/3", Region: "eu-west-1", UID: ptr[uint32](1000),
				Prefix: "a/b/",
			},
		},
		{
			name: "flags, modes and TTLs are typed",
			args: []string{
				"-f", "--allow-delete", "--allow-overwrite", "--dir-mode", "0755", "--file-mode=644",
				"--metadata-ttl", "indefinite", "--negative-metadata-ttl=5", "--read-part-size=8388608", "b.b", "d",
			},
			want: Options{
				Bucket: "b.b", MountPoint: "d", Foreground: true, AllowDelete: true, AllowOverwrite: true,
				DirMode: ptr[uint32](0o755), FileMode: ptr[uint32](0o644), MetadataTTL: &TTL{Indefinite: true},
				NegativeMetadataTTL: &TTL{Duration: 5 * time.Second}, ReadPartSize: ptr[uint64](8 << 20),
			},
		},
		{name: "an unknown option is an error", args: []string{"--allow-everything", "b12", "d"}, wantErr: "unknown option"},
		{name: "an unknown short option is an error", args: []string{"-x", "b12", "d"}, wantErr: "unknown option"},
		{name: "a missing directory is an error", args: []string{"b12"}, wantErr: "BUCKET DIRECTORY"},
		{name: "a flag with a value is an error", args: []string{"--read-only=yes", "b12", "d"}, wantErr: "takes no value"},
		{name: "a value option at the end lacks its value", args: []string{"b12", "d", "--uid"}, wantErr: "missing value"},
		{name: "a prefix must end with a slash", args: []string{"--prefix=a", "b12", "d"}, wantErr: "invalid prefix"},
		{name: "an endpoint must be an http URL", args: []string{"--endpoint-url=ftp://x", "b12", "d"}, wantErr: "endpoint"},
		{name: "a bad bucket name is an error", args: []string{"B", "d"}, wantErr: "bucket name"},
		{name: "a part size below 5 MiB is an error", args: []string{"--write-part-size=1", "b12", "d"}, wantErr: "integer from"},
		{name: "read-only excludes allow-delete", args: []string{"--read-only", "--allow-delete", "b12", "d"}, wantErr: "read-only"},
		{name: "allow-other excludes allow-root", args: []string{"--allow-other", "--allow-root", "b12", "d"}, wantErr: "mutually"},
		{name: "a file mode is octal", args: []string{"--file-mode=0999", "b12", "d"}, wantErr: "invalid value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want it to contain %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.args, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse(%q) = %+v, want %+v", tc.args, got, tc.want)
			}
		})
	}
}

func TestParseMountOptions(t *testing.T) {
	tests := []struct {
		name    string
		entries []string
		want    Options
		wantErr bool
	}{
		{
			name:    "entries may lack the leading dashes and use equals or a space",
			entries: []string{"allow-delete", "uid=1000", "--gid 2000", "region us-east-1", "--allow-other"},
			want: Options{
				AllowDelete: true, UID: ptr[uint32](1000), GID: ptr[uint32](2000), Region: "us-east-1",
				AllowOther: true,
			},
		},
		{
			name:    "a value may be the next entry",
			entries: []string{"--uid", "7", "--metadata-ttl", "300"},
			want:    Options{UID: ptr[uint32](7), MetadataTTL: &TTL{Duration: 300 * time.Second}},
		},
		{name: "an unknown option is an error", entries: []string{"allow-everything"}, wantErr: true},
		{name: "a positional argument is an error", entries: []string{"--read-only", "bucket"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMountOptions(tc.entries)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseMountOptions(%q) error = %v, wantErr %v", tc.entries, err, tc.wantErr)
			}
			if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseMountOptions(%q) = %+v, want %+v", tc.entries, got, tc.want)
			}
		})
	}
}

func TestUnknownOptionIsWrapped(t *testing.T) {
	_, err := ParseMountOptions([]string{"--nope"})
	if !errors.Is(err, ErrUnknownOption) {
		t.Fatalf("error %v does not wrap ErrUnknownOption", err)
	}
}

func TestCommandLineRoundTrips(t *testing.T) {
	args := []string{
		"--prefix=p/", "--region=r", "--endpoint-url=http://127.0.0.1:9000", "--force-path-style",
		"--allow-delete", "--uid=1", "--gid=2", "--dir-mode=0750", "--file-mode=0640", "--metadata-ttl=minimal",
		"--cache=/tmp/c", "--max-cache-size=10", "--part-size=5242880", "--max-threads=4",
		"--storage-class=STANDARD", "--sse=aws:kms", "--sse-kms-key-id=k", "--upload-checksums=off",
		"--user-agent-prefix=x y", "--debug", "bucket-1", "/mnt",
	}
	o, err := Parse(args)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(o.CommandLine())
	if err != nil {
		t.Fatalf("Parse(%q): %v", o.CommandLine(), err)
	}
	if !reflect.DeepEqual(o, again) {
		t.Fatalf("round trip changed options:\n%+v\n%+v", o, again)
	}
	if got, want := o.EffectiveReadPartSize(1), uint64(5<<20); got != want {
		t.Fatalf("EffectiveReadPartSize = %d, want %d", got, want)
	}
	if len(Names()) < 30 {
		t.Fatalf("Names() = %d options, want every option", len(Names()))
	}
}

// FuzzParse checks that no input panics and that whatever parses renders back to itself.
func FuzzParse(f *testing.F) {
	f.Add("--uid=1\x00--allow-delete\x00bucket-1\x00/mnt")
	f.Add("region us-east-1\x00prefix=a/\x00--metadata-ttl\x00indefinite")
	f.Add("--user-agent-prefix\x00a=b\x00b12\x00d")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		if o, err := Parse(args); err == nil {
			again, err := Parse(o.CommandLine())
			if err != nil || !reflect.DeepEqual(o, again) {
				t.Fatalf("Parse(%q) = %+v does not round-trip: %+v, %v", args, o, again, err)
			}
		}
		if o, err := ParseMountOptions(args); err == nil {
			again, err := ParseMountOptions(o.Args())
			if err != nil || !reflect.DeepEqual(o, again) {
				t.Fatalf("ParseMountOptions(%q) = %+v does not round-trip: %+v, %v", args, o, again, err)
			}
		}
	})
}

// mountS3Options are the options of mount-s3 1.18 (which the Scality 2.2 driver runs) and of
// later releases (which the AWS v2 driver runs), from their --help, each with a valid value.
var mountS3Options = [][]string{
	{"--prefix", "p/"}, {"--region", "eu-west-1"}, {"--endpoint-url", "http://127.0.0.1:9000"}, {"--force-path-style"},
	{"--transfer-acceleration"}, {"--dual-stack"}, {"--requester-pays"}, {"--bucket-type", "general-purpose"},
	{"--no-sign-request"}, {"--profile", "p"}, {"--read-only"}, {"--storage-class", "STANDARD"}, {"--allow-delete"},
	{"--allow-overwrite"}, {"--incremental-upload"}, {"--auto-unmount"}, {"--allow-root"}, {"--allow-other"},
	{"--maximum-throughput-gbps", "10"}, {"--max-threads", "16"}, {"--max-memory-target", "512"},
	{"--memory-target", "1024"}, {"--part-size", "8388608"}, {"--read-part-size", "8388608"},
	{"--write-part-size", "8388608"}, {"--ca-bundle", "/etc/ssl/ca.pem"}, {"--uid", "1000"}, {"--gid", "1000"},
	{"--dir-mode", "0755"}, {"--file-mode", "0644"}, {"--foreground"}, {"-f"}, {"--expected-bucket-owner", "123456789012"},
	{"--log-directory", "/var/log/mp"}, {"-l", "/var/log/mp"}, {"--log-metrics"}, {"--otlp-endpoint", "http://collector:4318"},
	{"--otlp-export-interval", "60"}, {"--debug"}, {"-d"}, {"--debug-crt"}, {"--no-log"}, {"--cache", "/tmp/c"},
	{"--metadata-ttl", "60"}, {"--negative-metadata-ttl", "minimal"}, {"--max-cache-size", "1024", "--cache", "/tmp/c"},
	{"--cache-block-size", "1024"}, {"--cache-xz", "cache--usw2-az1--x-s3"}, {"--user-agent-prefix", "x"},
	{"--sse", "aws:kms"}, {"--sse-kms-key-id", "arn:aws:kms:us-west-2:0:key/k", "--sse", "aws:kms"},
	{"--upload-checksums", "crc64nvme"}, {"--infer-content-type"}, {"--bind", "eth0"},
	// Not mount-s3's: the Scality and AWS drivers' option, which they turn into AWS_MAX_ATTEMPTS.
	{"--aws-max-attempts", "5"},
}

// Every option of mount-s3 parses, so that s3csi-mounter never exits with its usage on a
// command line mount-s3 takes; those s3fs has no use for are reported (Ignored).
func TestEveryMountS3OptionParses(t *testing.T) {
	ignored := map[string]bool{}
	for _, args := range mountS3Options {
		o, err := Parse(append(slices.Clone(args), "bucket-1", "/mnt"))
		if err != nil {
			t.Errorf("Parse(%q): %v", args, err)
			continue
		}
		again, err := Parse(o.CommandLine())
		if err != nil || !reflect.DeepEqual(o, again) {
			t.Errorf("Parse(%q) does not round-trip: %+v, %v", args, again, err)
		}
		for _, i := range o.Ignored() {
			ignored[i.Name] = true
		}
	}
	want := []string{"--bind", "--bucket-type", "--cache-block-size", "--cache-xz", "--debug-crt", "--dual-stack",
		"--incremental-upload", "--infer-content-type", "--log-directory", "--log-metrics", "--maximum-throughput-gbps",
		"--no-log", "--otlp-endpoint", "--otlp-export-interval", "--transfer-acceleration", "--upload-checksums=crc64nvme"}
	if got := slices.Sorted(maps.Keys(ignored)); !slices.Equal(got, want) {
		t.Fatalf("ignored options = %q, want %q", got, want)
	}
}

func TestShortOptions(t *testing.T) {
	o, err := Parse([]string{"-d", "-l", "/var/log", "-f", "bucket-1", "/mnt"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.Debug || o.LogDirectory != "/var/log" || !o.Foreground {
		t.Fatalf("Parse(-d -l /var/log -f) = %+v", o)
	}
	if _, err := Parse([]string{"-x", "bucket-1", "/mnt"}); !errors.Is(err, ErrUnknownOption) {
		t.Fatalf("Parse(-x) = %v, want an unknown option", err)
	}
	if _, err := ParseMountOptions([]string{"-d", "aws-max-attempts 5"}); err != nil {
		t.Fatalf("ParseMountOptions(-d, aws-max-attempts 5) = %v", err)
	}
}
