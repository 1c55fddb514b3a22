package mountargs

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxPartSize is S3's largest multipart part (5 GiB).
const maxPartSize = 5 << 30

// optionSpec describes one option: a flag (no value) or a value with a setter and a renderer.
type optionSpec struct {
	name string
	// ignored, when set, says why s3fs does not honor the option (Options.Ignored).
	ignored   string
	flag      bool
	boolField func(*Options) *bool
	set       func(*Options, string) error
	// render returns the value to print, or ok=false when the option is not set.
	render func(*Options) (value string, ok bool)
}

func flagSpec(name string, field func(*Options) *bool) optionSpec {
	return optionSpec{name: name, flag: true, boolField: field}
}

func stringSpec(name string, field func(*Options) *string, check func(string) error) optionSpec {
	return optionSpec{
		name: name,
		set: func(o *Options, v string) error {
			if v == "" {
				return errors.New("empty value")
			}
			if strings.TrimSpace(v) != v || strings.ContainsAny(v, "\x00\n") {
				return fmt.Errorf("invalid value %q: surrounding white space or control characters", v)
			}
			if check != nil {
				if err := check(v); err != nil {
					return err
				}
			}
			*field(o) = v
			return nil
		},
		render: func(o *Options) (string, bool) { return *field(o), *field(o) != "" },
	}
}

func uint32Spec(name string, field func(*Options) **uint32, base int, limit uint64) optionSpec {
	return optionSpec{
		name: name,
		set: func(o *Options, v string) error {
			n, err := strconv.ParseUint(v, base, 32)
			if err != nil || n > limit {
				return fmt.Errorf("invalid value %q", v)
			}
			u := uint32(n)
			*field(o) = &u
			return nil
		},
		render: func(o *Options) (string, bool) {
			p := *field(o)
			if p == nil {
				return "", false
			}
			if base == 8 {
				return fmt.Sprintf("%04o", *p), true
			}
			return strconv.FormatUint(uint64(*p), 10), true
		},
	}
}

func uint64Spec(name string, field func(*Options) **uint64, lo, hi uint64) optionSpec {
	return optionSpec{
		name: name,
		set: func(o *Options, v string) error {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n < lo || n > hi {
				return fmt.Errorf("invalid value %q: want an integer from %d to %d", v, lo, hi)
			}
			*field(o) = &n
			return nil
		},
		render: func(o *Options) (string, bool) {
			if p := *field(o); p != nil {
				return strconv.FormatUint(*p, 10), true
			}
			return "", false
		},
	}
}

func ttlSpec(name string, field func(*Options) **TTL, named bool) optionSpec {
	return optionSpec{
		name: name,
		set: func(o *Options, v string) error {
			t, err := parseTTL(v, named)
			if err != nil {
				return err
			}
			*field(o) = &t
			return nil
		},
		render: func(o *Options) (string, bool) {
			t := *field(o)
			switch {
			case t == nil:
				return "", false
			case t.Indefinite:
				return "indefinite", true
			case t.Minimal:
				return "minimal", true
			}
			return strconv.FormatInt(int64(t.Duration/time.Second), 10), true
		},
	}
}

func parseTTL(v string, named bool) (TTL, error) {
	if named && v == "indefinite" {
		return TTL{Indefinite: true}, nil
	}
	if named && v == "minimal" {
		return TTL{Minimal: true}, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > math.MaxInt64/uint64(time.Second) {
		return TTL{}, fmt.Errorf("invalid value %q: want seconds", v)
	}
	return TTL{Duration: time.Duration(n) * time.Second}, nil
}

func oneOf(values ...string) func(string) error {
	return func(v string) error {
		for _, ok := range values {
			if v == ok {
				return nil
			}
		}
		return fmt.Errorf("invalid value %q: want one of %s", v, strings.Join(values, ", "))
	}
}

func checkPrefix(v string) error {
	if !strings.HasSuffix(v, "/") || strings.HasPrefix(v, "/") {
		return fmt.Errorf("invalid prefix %q: must end with \"/\" and not start with it", v)
	}
	return nil
}

func checkEndpoint(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid endpoint URL %q: want http(s)://host[:port]", v)
	}
	return nil
}

func checkNoSpace(v string) error {
	if strings.ContainsAny(v, " \t\n\x00") {
		return fmt.Errorf("invalid value %q: contains white space", v)
	}
	return nil
}

// specs lists every option in the order Args renders them.
var specs = []optionSpec{
	stringSpec("prefix", func(o *Options) *string { return &o.Prefix }, checkPrefix),
	stringSpec("region", func(o *Options) *string { return &o.Region }, checkNoSpace),
	stringSpec("endpoint-url", func(o *Options) *string { return &o.EndpointURL }, checkEndpoint),
	flagSpec("force-path-style", func(o *Options) *bool { return &o.ForcePathStyle }),
	stringSpec("profile", func(o *Options) *string { return &o.Profile }, checkNoSpace),
	flagSpec("no-sign-request", func(o *Options) *bool { return &o.NoSignRequest }),
	flagSpec("requester-pays", func(o *Options) *bool { return &o.RequesterPays }),
	stringSpec("expected-bucket-owner", func(o *Options) *string { return &o.ExpectedBucketOwner }, checkNoSpace),
	flagSpec("read-only", func(o *Options) *bool { return &o.ReadOnly }),
	flagSpec("allow-delete", func(o *Options) *bool { return &o.AllowDelete }),
	flagSpec("allow-overwrite", func(o *Options) *bool { return &o.AllowOverwrite }),
	flagSpec("allow-other", func(o *Options) *bool { return &o.AllowOther }),
	flagSpec("allow-root", func(o *Options) *bool { return &o.AllowRoot }),
	flagSpec("auto-unmount", func(o *Options) *bool { return &o.AutoUnmount }),
	flagSpec("abort-on-signal", func(o *Options) *bool { return &o.AbortOnSignal }),
	uint32Spec("uid", func(o *Options) **uint32 { return &o.UID }, 10, math.MaxUint32),
	uint32Spec("gid", func(o *Options) **uint32 { return &o.GID }, 10, math.MaxUint32),
	uint32Spec("dir-mode", func(o *Options) **uint32 { return &o.DirMode }, 8, 0o7777),
	uint32Spec("file-mode", func(o *Options) **uint32 { return &o.FileMode }, 8, 0o7777),
	ttlSpec("metadata-ttl", func(o *Options) **TTL { return &o.MetadataTTL }, true),
	ttlSpec("negative-metadata-ttl", func(o *Options) **TTL { return &o.NegativeMetadataTTL }, true),
	stringSpec("cache", func(o *Options) *string { return &o.CacheDir }, nil),
	uint64Spec("max-cache-size", func(o *Options) **uint64 { return &o.MaxCacheSize }, 1, math.MaxUint32),
	uint64Spec("max-memory-target", func(o *Options) **uint64 { return &o.MaxMemoryTarget }, 16, math.MaxUint32),
	uint64Spec("memory-target", func(o *Options) **uint64 { return &o.MemoryTarget }, 16, math.MaxUint32),
	uint64Spec("part-size", func(o *Options) **uint64 { return &o.PartSize }, 5<<20, maxPartSize),
	uint64Spec("read-part-size", func(o *Options) **uint64 { return &o.ReadPartSize }, 64<<10, maxPartSize),
	uint64Spec("write-part-size", func(o *Options) **uint64 { return &o.WritePartSize }, 5<<20, maxPartSize),
	intSpec("max-threads", func(o *Options) **int { return &o.MaxThreads }, 1, 1024),
	stringSpec("storage-class", func(o *Options) *string { return &o.StorageClass }, checkNoSpace),
	stringSpec("sse", func(o *Options) *string { return &o.SSE }, oneOf("AES256", "aws:kms", "aws:kms:dsse")),
	stringSpec("sse-kms-key-id", func(o *Options) *string { return &o.SSEKMSKeyID }, checkNoSpace),
	stringSpec("upload-checksums", func(o *Options) *string { return &o.UploadChecksums }, oneOf("crc32c", "off", "crc64nvme")),
	stringSpec("user-agent-prefix", func(o *Options) *string { return &o.UserAgentPrefix }, nil),
	flagSpec("foreground", func(o *Options) *bool { return &o.Foreground }),
	flagSpec("debug", func(o *Options) *bool { return &o.Debug }),
	intSpec("aws-max-attempts", func(o *Options) **int { return &o.MaxAttempts }, 1, maxAttempts),
	stringSpec("ca-bundle", func(o *Options) *string { return &o.CABundle }, nil),

	ignore(flagSpec("debug-crt", func(o *Options) *bool { return &o.DebugCRT }),
		"s3fs has no AWS Common Runtime; --debug makes its S3 client log each retried request"),
	ignore(flagSpec("no-log", func(o *Options) *bool { return &o.NoLog }), "s3csi-mounter always logs to its standard error"),
	ignore(stringSpec("log-directory", func(o *Options) *string { return &o.LogDirectory }, nil), "s3csi-mounter always logs to its standard error"),
	ignore(flagSpec("log-metrics", func(o *Options) *bool { return &o.LogMetrics }), "s3csi-mounter logs no metrics summary"),
	ignore(stringSpec("otlp-endpoint", func(o *Options) *string { return &o.OTLPEndpoint }, checkNoSpace), "s3csi-mounter exports no OTLP metrics"),
	ignore(uint64Spec("otlp-export-interval", func(o *Options) **uint64 { return &o.OTLPExportInterval }, 1, math.MaxUint32),
		"s3csi-mounter exports no OTLP metrics"),
	ignore(uint64Spec("maximum-throughput-gbps", func(o *Options) **uint64 { return &o.MaximumThroughputGbps }, 1, math.MaxUint32),
		"s3fs has no throughput target: --max-threads bounds its concurrent requests, --memory-target its buffers"),
	ignore(flagSpec("dual-stack", func(o *Options) *bool { return &o.DualStack }), "s3fs uses the endpoint it is given (--endpoint-url or AWS_ENDPOINT_URL)"),
	ignore(flagSpec("transfer-acceleration", func(o *Options) *bool { return &o.TransferAcceleration }),
		"s3fs uses the endpoint it is given (--endpoint-url or AWS_ENDPOINT_URL)"),
	ignore(stringSpec("bucket-type", func(o *Options) *string { return &o.BucketType }, oneOf("general-purpose", "directory")),
		"s3fs serves every bucket as a general purpose bucket"),
	ignore(stringSpec("bind", func(o *Options) *string { return &o.Bind }, checkNoSpace), "s3fs connects through the system's routes"),
	ignore(uint64Spec("cache-block-size", func(o *Options) **uint64 { return &o.CacheBlockSize }, 1, math.MaxUint32),
		"the cache keeps blocks of 1 MiB, mount-s3's default"),
	ignore(stringSpec("cache-xz", func(o *Options) *string { return &o.CacheXZ }, checkNoSpace), "S3 Express One Zone shared caches are not supported"),
	ignore(flagSpec("incremental-upload", func(o *Options) *bool { return &o.IncrementalUpload }),
		"appending to existing objects is not supported: opening a file for appending fails with EPERM"),
	ignore(flagSpec("infer-content-type", func(o *Options) *bool { return &o.InferContentType }),
		"new objects get the endpoint's default Content-Type"),
}

// maxAttempts bounds --aws-max-attempts as the driver's mount-option policy does
// (shared/mountopts.MaxAttempts).
const maxAttempts = 100

// shortNames are mount-s3's one-letter options.
var shortNames = map[string]string{"f": "foreground", "d": "debug", "l": "log-directory"}

// ignore marks s as an option s3fs parses but does not honor, for reason.
func ignore(s optionSpec, reason string) optionSpec {
	s.ignored = reason
	return s
}

func intSpec(name string, field func(*Options) **int, lo, hi int) optionSpec {
	return optionSpec{
		name: name,
		set: func(o *Options, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < lo || n > hi {
				return fmt.Errorf("invalid value %q: want %d to %d", v, lo, hi)
			}
			*field(o) = &n
			return nil
		},
		render: func(o *Options) (string, bool) {
			if p := *field(o); p != nil {
				return strconv.Itoa(*p), true
			}
			return "", false
		},
	}
}

// Names returns every option name mount-s3 accepts (without "--"), for allow-list policies.
func Names() []string {
	names := make([]string, 0, len(specs))
	for i := range specs {
		names = append(names, specs[i].name)
	}
	return names
}
