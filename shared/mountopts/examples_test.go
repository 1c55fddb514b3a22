package mountopts

import (
	"slices"
	"strings"
	"testing"
)

// examplePVs are the mountOptions of the example PersistentVolumes and StorageClasses that
// PersistentVolumes written for the Scality v2 driver (2.2.0) and the AWS v2 driver copy: Scality's
// docs/volume-provisioning (mount-options.md, static-provisioning/examples/assets/*.yaml),
// docs/troubleshooting.md and tests/e2e/customsuites/mountoptions.go; AWS's
// examples/kubernetes/static_provisioning/*.yaml, docs/CACHING.md and docs/METRICS.md; and the
// mount-s3 options an operator switching from Scality 2.2 found refused. Each row is what s3csi
// makes of it: the arguments the mounter gets (before the driver's defaults) and a substring of
// each warning, or the error.
var examplePVs = []struct {
	name    string
	entries []string
	want    []string
	warn    []string
	wantErr []string
}{
	{name: "Scality mount-options.md: the static PersistentVolume",
		entries: []string{"allow-delete", "uid=1000", "gid=1000", "allow-other", "file-mode=0640", "dir-mode=0750",
			"region=eu-west-1", "prefix=app-data/", "cache /mnt/host_cache/my-s3-volume", "debug"},
		want: []string{"--allow-delete", "--allow-other", "--cache=my-s3-volume", "--debug", "--dir-mode=0750",
			"--file-mode=0640", "--gid=1000", "--prefix=app-data/", "--region=eu-west-1", "--uid=1000"},
		warn: []string{`"cache /mnt/host_cache/my-s3-volume" names the cache "my-s3-volume"`}},
	{name: "Scality mount-options.md: the StorageClass",
		entries: []string{"allow-delete", "uid=1000", "gid=1000", "allow-other", "file-mode=0640", "dir-mode=0750",
			"region=eu-west-1", "prefix=app-data/", "debug"},
		want: []string{"--allow-delete", "--allow-other", "--debug", "--dir-mode=0750", "--file-mode=0640", "--gid=1000",
			"--prefix=app-data/", "--region=eu-west-1", "--uid=1000"}},
	{name: "Scality mount-options.md: local caching",
		entries: []string{"cache /mnt/s3_cache_vol_abc", "metadata-ttl 600", "max-cache-size 5120"},
		want:    []string{"--cache=s3_cache_vol_abc", "--max-cache-size=5120", "--metadata-ttl=600"},
		warn:    []string{"never in /mnt/s3_cache_vol_abc on the node"}},
	{name: "Scality mount-options.md: non-root user access",
		entries: []string{"uid=1001", "gid=2002", "allow-other", "file-mode=0664", "dir-mode=0775"},
		want:    []string{"--allow-other", "--dir-mode=0775", "--file-mode=0664", "--gid=2002", "--uid=1001"}},
	{name: "Scality advanced_local_caching.yaml",
		entries: []string{"cache /tmp/s3-pv1-cache", "metadata-ttl 3", "max-cache-size 500"},
		want:    []string{"--cache=s3-pv1-cache", "--max-cache-size=500", "--metadata-ttl=3"},
		warn:    []string{`names the cache "s3-pv1-cache"`}},
	{name: "Scality allow-root.yaml",
		entries: []string{"allow-delete", "uid=1000", "gid=2000", "allow-root"},
		want:    []string{"--allow-delete", "--allow-root", "--gid=2000", "--uid=1000"}},
	{name: "Scality and AWS aws_max_attempts.yaml",
		entries: []string{"allow-delete", "region us-west-2", "aws-max-attempts 5"},
		want:    []string{"--allow-delete", "--aws-max-attempts=5", "--region=us-west-2"}},
	{name: "Scality bucket-prefix.yaml",
		entries: []string{"allow-delete", "allow-overwrite", "prefix=app-data/"},
		want:    []string{"--allow-delete", "--allow-overwrite", "--prefix=app-data/"}},
	{name: "Scality debug-logging.yaml and troubleshooting.md",
		entries: []string{"allow-delete", "region us-west-2", "debug", "debug-crt"},
		want:    []string{"--allow-delete", "--debug", "--region=us-west-2"},
		warn:    []string{`"debug-crt" is ignored: s3csi-mounter has no AWS Common Runtime`}},
	{name: "Scality file-permissions.yaml",
		entries: []string{"allow-delete", "allow-overwrite", "uid=1000", "gid=2000", "allow-other", "file-mode=0640", "dir-mode=0750"},
		want: []string{"--allow-delete", "--allow-other", "--allow-overwrite", "--dir-mode=0750", "--file-mode=0640",
			"--gid=2000", "--uid=1000"}},
	{name: "Scality and AWS kms_sse.yaml",
		entries: []string{"allow-delete", "region us-west-2", "sse aws:kms",
			"sse-kms-key-id arn:aws:kms:us-west-2:012345678900:key/00000000-0000-0000-0000-000000000000"},
		want: []string{"--allow-delete", "--region=us-west-2", "--sse-kms-key-id=arn:aws:kms:us-west-2:012345678900:key/00000000-0000-0000-0000-000000000000",
			"--sse=aws:kms"}},
	{name: "Scality local_cache.yaml",
		entries: []string{"allow-delete", "region us-west-2", "cache /tmp/s3-csi-driver-cache"},
		want:    []string{"--allow-delete", "--cache=s3-csi-driver-cache", "--region=us-west-2"},
		warn:    []string{`names the cache "s3-csi-driver-cache"`}},
	{name: "Scality and AWS multiple_pods_one_pv.yaml",
		entries: []string{"allow-delete", "region us-east-1"},
		want:    []string{"--allow-delete", "--region=us-east-1"}},
	{name: "Scality override-region.yaml",
		entries: []string{"allow-delete", "region=eu-west-1"},
		want:    []string{"--allow-delete", "--region=eu-west-1"}},
	{name: "Scality and AWS static_provisioning.yaml",
		entries: []string{"allow-delete", "region us-west-2", "prefix some-s3-prefix/"},
		want:    []string{"--allow-delete", "--prefix=some-s3-prefix/", "--region=us-west-2"}},
	{name: "Scality e2e: a prefix holding an equals sign",
		entries: []string{"prefix=env=prod/"},
		want:    []string{"--prefix=env=prod/"}},
	{name: "Scality e2e: options its policy strips that only tune mount-s3",
		entries: []string{"--cache-xz", "--incremental-upload", "--storage-class=EXPRESS_ONEZONE"},
		warn: []string{`"--cache-xz" is ignored: S3 Express One Zone shared caches`, `"--incremental-upload" is ignored: appending`,
			`"--storage-class=EXPRESS_ONEZONE" is ignored: new objects get the bucket's default storage class`}},
	{name: "Scality e2e: options its policy strips that choose the endpoint or credentials are refused",
		entries: []string{"--endpoint-url=https://wrong.example.com", "--cache-xz", "--incremental-upload",
			"--storage-class=EXPRESS_ONEZONE", "--profile=my-aws-profile"},
		wantErr: []string{`"--endpoint-url=https://wrong.example.com" is not allowed: the endpoint is set by the driver's configuration`,
			`"--profile=my-aws-profile" is not allowed: credentials are provided by the driver`}},
	{name: "Scality e2e: raw FUSE options are refused", entries: []string{"-o"},
		wantErr: []string{`"-o" is not allowed: raw FUSE options are set by the driver: use the named options instead`}},
	{name: "AWS caching.yaml", entries: []string{"metadata-ttl 3"}, want: []string{"--metadata-ttl=3"}},
	{name: "AWS CACHING.md: the deprecated cache on a host path",
		entries: []string{"metadata-ttl indefinite", "cache /cache/folder/on/host"},
		want:    []string{"--cache=host", "--metadata-ttl=indefinite"},
		warn:    []string{`names the cache "host"`}},
	{name: "AWS static_provisioning_with_shared_cache.yaml",
		entries: []string{"allow-delete", "region us-west-2", "cache-xz s3-csi-driver--usw2-az1--x-s3"},
		want:    []string{"--allow-delete", "--region=us-west-2"},
		warn:    []string{`"cache-xz s3-csi-driver--usw2-az1--x-s3" is ignored`}},
	{name: "AWS mountpoint-metrics.yaml",
		entries: []string{"allow-overwrite", "region=us-west-2", "otlp-endpoint=http://cloudwatch-agent.amazon-cloudwatch.svc.cluster.local:4318"},
		want:    []string{"--allow-overwrite", "--region=us-west-2"},
		warn:    []string{"is ignored: s3csi-mounter exports no OTLP metrics"}},
	{name: "aws-max-attempts in every spelling Scality PersistentVolumes use",
		entries: []string{"aws-max-attempts=5", "--aws-max-attempts=6", "--aws-max-attempts 7"},
		want:    []string{"--aws-max-attempts=7"}},
	{name: "aws-max-attempts out of range", entries: []string{"aws-max-attempts 0"}, wantErr: []string{`"aws-max-attempts 0": want an integer from 1 to 100`}},
	{name: "mount-s3 options that only tune mount-s3",
		entries: []string{"--maximum-throughput-gbps=10", "--debug-crt", "--no-log", "--log-metrics", "--dual-stack",
			"--transfer-acceleration", "--bucket-type=general-purpose", "--bind=eth0", "--cache-block-size=1024",
			"--infer-content-type", "--incremental-upload", "--auto-unmount", "-f", "--user-agent-prefix=my-app"},
		warn: []string{`"--maximum-throughput-gbps=10" is ignored`, `"--debug-crt" is ignored`, `"--no-log" is ignored`,
			`"--log-metrics" is ignored`, `"--dual-stack" is ignored`, `"--transfer-acceleration" is ignored`,
			`"--bucket-type=general-purpose" is ignored`, `"--bind=eth0" is ignored`, `"--cache-block-size=1024" is ignored`,
			`"--infer-content-type" is ignored`, `"--incremental-upload" is ignored`, `"--auto-unmount" is ignored`,
			`"-f" is ignored`, `"--user-agent-prefix=my-app" is ignored`}},
	{name: "mount-s3 options that work in another spelling or value",
		entries: []string{"-d", "--upload-checksums crc64nvme"},
		want:    []string{"--debug"},
		warn:    []string{`"--upload-checksums crc64nvme" is changed to the default, crc32c`}},
	{name: "mount-s3 options that choose the node's files or trust are refused",
		entries: []string{"--log-directory=/var/log/mountpoint", "--ca-bundle=/etc/ssl/ca.pem"},
		wantErr: []string{`"--log-directory=/var/log/mountpoint" is not allowed: logs go to the Mountpoint Pod's output`,
			`"--ca-bundle=/etc/ssl/ca.pem" is not allowed: the S3 endpoint's CA is the driver's: set it with the chart value ` + "`s3.caBundle`"}},
}

func TestScalityAndAWSExamplePersistentVolumes(t *testing.T) {
	for _, tt := range examplePVs {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Parse(tt.entries)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Parse(%q) accepted %q, want an error", tt.entries, o.Args())
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Parse(%q) = %v, want an error containing %q", tt.entries, err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q) = %v", tt.entries, err)
			}
			if got := o.Args(); !slices.Equal(got, tt.want) && len(got)+len(tt.want) > 0 {
				t.Errorf("Parse(%q) sends %q, want %q", tt.entries, got, tt.want)
			}
			got := o.Warnings()
			if len(got) != len(tt.warn) {
				t.Fatalf("Parse(%q) warns %q, want %d warnings", tt.entries, got, len(tt.warn))
			}
			for i, want := range tt.warn {
				if !strings.Contains(got[i], want) {
					t.Errorf("warning %d = %q, want it to contain %q", i, got[i], want)
				}
			}
			// What the node-agent sends, the mounter's check of a request lets through.
			o.ApplyDefaults(false)
			if err := CheckArgs(o.Args()); err != nil {
				t.Errorf("CheckArgs(%q) = %v", o.Args(), err)
			}
		})
	}
}

// needs are the options an option needs beside it (Options.checkTogether).
var needs = map[string]string{"max-cache-size": "cache=data", "sse-kms-key-id": "sse=aws:kms"}

// Every option does what the table (and so the docs) says: one that works is sent as written,
// without a warning; one that is ignored is dropped with a warning giving the reason; one that is
// refused fails with the reason. Each alias does what its option does.
func TestEveryOptionDoesWhatTheTableSays(t *testing.T) {
	for _, opt := range Known() {
		for _, spelling := range append([]string{opt.Name}, opt.Aliases...) {
			entry := spelling
			if opt.Example != "" {
				entry += "=" + opt.Example
			}
			t.Run(entry, func(t *testing.T) {
				entries, want := []string{entry}, []string{"--" + strings.Replace(entry, spelling, opt.Name, 1)}
				if n, ok := needs[opt.Name]; ok {
					entries, want = append(entries, n), append(want, "--"+n)
					slices.Sort(want)
				}
				o, err := Parse(entries)
				switch opt.Verdict {
				case Works:
					if err != nil || !slices.Equal(o.Args(), want) || len(o.Warnings()) != 0 {
						t.Fatalf("Parse(%q) = %v; want %q without a warning", entries, err, want)
					}
				case Ignored:
					if err != nil || len(o.Args()) != 0 || len(o.Warnings()) != 1 || !strings.Contains(o.Warnings()[0], opt.Note) {
						t.Fatalf("Parse(%q) = %v; want it dropped with a warning giving the reason", entries, err)
					}
				case Refused:
					if err == nil || !strings.Contains(err.Error(), opt.Note) {
						t.Fatalf("Parse(%q) = %v; want an error giving the reason", entry, err)
					}
				default:
					t.Fatalf("option %s has no verdict", opt.Name)
				}
			})
		}
	}
}

func TestEveryOptionIsDocumented(t *testing.T) {
	seen := map[string]bool{}
	for _, opt := range Known() {
		for _, n := range append([]string{opt.Name}, opt.Aliases...) {
			if seen[n] {
				t.Errorf("%q names two options", n)
			}
			seen[n] = true
		}
		if opt.Note == "" || strings.Contains(opt.Note, "|") {
			t.Errorf("option %s: want a note without |", opt.Name)
		}
		if (opt.Value == "") != (opt.Example == "") && opt.Verdict != Refused {
			t.Errorf("option %s: a value option needs an example and a flag none", opt.Name)
		}
	}
}
