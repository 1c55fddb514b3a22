package mountopts

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Verdict is what the policy does with an option.
type Verdict string

const (
	// Works means the option is sent to the mounter, which honors it.
	Works Verdict = "works"
	// Ignored means the option is accepted and dropped; the workload gets a Warning Event saying why.
	Ignored Verdict = "ignored"
	// Refused means the publish fails with InvalidArgument, the reason and what to use instead.
	Refused Verdict = "refused"
)

// Option describes one option the policy knows, for docs and tests.
type Option struct {
	// Name is the option's long name, without "--".
	Name string
	// Aliases are its short spellings, without "-" (mount-s3's "-d" for "--debug").
	Aliases []string
	// Verdict is what the policy does with it.
	Verdict Verdict
	// Value says what its value must be; "" for a flag.
	Value string
	// Example is a value the policy accepts without a warning; "" for a flag or a refused option.
	Example string
	// Note says what s3csi does with it (Works), why it is ignored (Ignored), or why it is refused
	// and what to use instead (Refused).
	Note string
}

// kind is what an option's value must look like.
type kind int

const (
	noValue kind = iota
	// uintValue is an integer from spec.min to spec.max (no bound when max is 0).
	uintValue
	octalMode
	word
	// enumValue is one of spec.values.
	enumValue
	prefixValue
	ttlValue
	// cacheValue is a cache name or, as Scality's and AWS's examples write it, a path, whose
	// last element becomes the name (adjust).
	cacheValue
	// checksumValue is an upload checksum algorithm; crc64nvme becomes the default (adjust).
	checksumValue
	// anyValue is not checked: the option is refused whatever its value.
	anyValue
)

// MaxAttempts bounds aws-max-attempts: every S3 request is also bounded by the mounter's
// request timeout, which more attempts would not outlast.
const MaxAttempts = 100

// Bounds the mounter's parser (services/mounter/internal/mountargs) puts on values, so that
// what the node-agent accepts the mounter parses.
const (
	maxID       = math.MaxUint32
	minPart     = 5 << 20
	minReadPart = 64 << 10
	maxPart     = 5 << 30
	minMemory   = 16
	maxThreads  = 1024
)

// spec is the policy for one option.
type spec struct {
	name    string
	aliases []string
	verdict Verdict
	kind    kind
	// min and max bound a uintValue; values lists an enumValue's values.
	min, max uint64
	values   []string
	example  string
	note     string
}

// valueDoc says, for the docs, what the option's value must be.
func (s *spec) valueDoc() string {
	switch s.kind {
	case noValue:
		return ""
	case uintValue:
		switch {
		case s.max != 0:
			return fmt.Sprintf("integer, %d to %d", s.min, s.max)
		case s.min != 0:
			return fmt.Sprintf("integer, at least %d", s.min)
		}
		return "integer"
	case octalMode:
		return "octal, at most 777"
	case word:
		return "one word"
	case enumValue:
		return "`" + strings.Join(s.values, "`, `") + "`"
	case prefixValue:
		return "key prefix ending in `/`"
	case ttlValue:
		return "seconds, `indefinite` or `minimal`"
	case cacheValue:
		return "name (or path: see the note)"
	case checksumValue:
		return "`crc32c`, `off` (or `crc64nvme`: see the note)"
	}
	return "any"
}

// processOption is why mount-s3's process options (foreground, help, version) are ignored:
// the Scality v2 driver dropped them from every volume's options.
const processOption = "the mounter's process is the driver's to run (the Scality v2 driver dropped it too)"

// specs lists every option the policy knows: mount-s3 1.18's options (which Scality 2.2 passes
// on), the later ones the AWS v2 driver passes on, and the drivers' own aws-max-attempts.
// Everything else is refused as unknown.
var specs = []spec{
	// Options that work.
	{name: "abort-on-signal", verdict: Works, note: "a file whose writer got a signal while writing or closing it is not stored (s3csi-mounter's own option)"},
	{name: "allow-delete", verdict: Works, note: "deleting a file deletes its object; an empty directory's marker too"},
	{name: "allow-other", verdict: Works, note: "every user may use the mount (the driver adds it, with group modes, for a workload's fsGroup)"},
	{name: "allow-overwrite", verdict: Works, note: "opening an existing file with `O_TRUNC` replaces its object"},
	{name: "allow-root", verdict: Works, note: "root may use the mount; the driver adds it when allow-other is absent"},
	{name: "aws-max-attempts", verdict: Works, kind: uintValue, min: 1, max: MaxAttempts, example: "5",
		note: "attempts of each S3 request, the first included (default 4), as `AWS_MAX_ATTEMPTS` gave them to mount-s3 under the Scality and AWS drivers; the request timeout still bounds them"},
	{name: "cache", verdict: Works, kind: cacheValue, example: "data",
		note: "caches object content in `<temp dir>/s3csi-cache/<name>` of the Mountpoint Pod. A path (`cache /tmp/x`, as Scality's and AWS's examples write it) is accepted with a Warning: its last element names the cache, which stays in the Mountpoint Pod, never on the host path (neither driver used the path either)"},
	{name: "debug", aliases: []string{"d"}, verdict: Works, note: "the S3 client also logs each request it retries; requests that still fail are always logged"},
	{name: "dir-mode", verdict: Works, kind: octalMode, example: "750", note: "permission bits of directories (default 755)"},
	{name: "expected-bucket-owner", verdict: Works, kind: word, example: "123456789012", note: "requests fail unless the bucket belongs to this account"},
	{name: "file-mode", verdict: Works, kind: octalMode, example: "640", note: "permission bits of files (default 644)"},
	{name: "force-path-style", verdict: Works, note: "path-style addressing; the driver's `s3.pathStyle` sets it for every volume"},
	{name: "gid", verdict: Works, kind: uintValue, max: maxID, example: "2000", note: "group of every file and directory (default: the workload's fsGroup, else 0 as under the Scality driver)"},
	{name: "max-cache-size", verdict: Works, kind: uintValue, min: 1, max: maxID, example: "1024", note: "bounds the cache, in MiB; needs cache"},
	{name: "max-memory-target", verdict: Works, kind: uintValue, min: minMemory, max: maxID, example: "512", note: "bounds the data buffers, in MiB"},
	{name: "max-threads", verdict: Works, kind: uintValue, min: 1, max: maxThreads, example: "16", note: "concurrency of the mounter's S3 client (default 16)"},
	{name: "memory-target", verdict: Works, kind: uintValue, min: minMemory, max: maxID, example: "256", note: "the mounter's whole memory target, in MiB (mount-s3 1.24's name)"},
	{name: "metadata-ttl", verdict: Works, kind: ttlValue, example: "indefinite", note: "how long looked-up metadata is trusted (default 1 s, 60 s with cache)"},
	{name: "negative-metadata-ttl", verdict: Works, kind: ttlValue, example: "60", note: "how long a missing name is trusted to stay missing (default: metadata-ttl)"},
	{name: "no-sign-request", verdict: Works, note: "anonymous requests: no credentials are sent"},
	{name: "part-size", verdict: Works, kind: uintValue, min: minPart, max: maxPart, example: "8388608", note: "size of ranged GETs and upload parts, in bytes"},
	{name: "prefix", verdict: Works, kind: prefixValue, example: "data/", note: "mounts only the keys under this prefix"},
	{name: "read-only", verdict: Works, note: "every modification fails with EROFS; drops allow-delete and allow-overwrite"},
	{name: "read-part-size", verdict: Works, kind: uintValue, min: minReadPart, max: maxPart, example: "8388608", note: "size of ranged GETs, in bytes"},
	{name: "region", verdict: Works, kind: word, example: "eu-west-1", note: "the bucket's region (default: the driver's `s3.region`)"},
	{name: "requester-pays", verdict: Works, note: "requests carry `x-amz-request-payer: requester`"},
	{name: "sse", verdict: Works, kind: enumValue, values: []string{"AES256", "aws:kms", "aws:kms:dsse"}, example: "aws:kms", note: "server-side encryption of new objects"},
	{name: "sse-kms-key-id", verdict: Works, kind: word, example: "key-1", note: "KMS key of new objects; needs sse `aws:kms` or `aws:kms:dsse`"},
	{name: "uid", verdict: Works, kind: uintValue, max: maxID, example: "1000", note: "owner of every file and directory (default: the mounter's)"},
	{name: "upload-checksums", verdict: Works, kind: checksumValue, example: "off",
		note: "`crc32c` (default) or `off`. `crc64nvme` is accepted with a Warning and uploads carry CRC32C: s3csi-mounter does not compute CRC64NVME"},
	{name: "write-part-size", verdict: Works, kind: uintValue, min: minPart, max: maxPart, example: "8388608", note: "size of upload parts, in bytes"},

	// Options accepted and ignored: each tunes mount-s3 itself, or names what s3csi does anyway.
	{name: "auto-unmount", verdict: Ignored, note: "the node-agent unmounts the volume when its last workload goes"},
	{name: "bind", verdict: Ignored, kind: word, example: "eth0", note: "the Mountpoint Pod reaches S3 through its pod network"},
	{name: "bucket-type", verdict: Ignored, kind: enumValue, values: []string{"general-purpose", "directory"}, example: "general-purpose", note: "s3csi-mounter serves every bucket as a general purpose bucket"},
	{name: "cache-block-size", verdict: Ignored, kind: uintValue, example: "1024", note: "the cache keeps blocks of 1 MiB, mount-s3's default (released mount-s3 builds lack the option)"},
	{name: "cache-xz", verdict: Ignored, kind: word, example: "cache-bucket--usw2-az1--x-s3",
		note: "S3 Express One Zone shared caches are not supported (the Scality v2 driver dropped it too); cache gives a local cache"},
	{name: "debug-crt", verdict: Ignored, note: "s3csi-mounter has no AWS Common Runtime to log; debug makes its S3 client log each retried request"},
	{name: "dual-stack", verdict: Ignored, note: "the endpoint is the driver's `s3.endpointUrl`: for IPv6 give it a dual-stack host name"},
	{name: "foreground", aliases: []string{"f"}, verdict: Ignored, note: processOption},
	{name: "help", aliases: []string{"h"}, verdict: Ignored, note: processOption},
	{name: "incremental-upload", verdict: Ignored,
		note: "appending to existing objects is not supported (the Scality v2 driver dropped it too): opening a file for appending fails with EPERM"},
	{name: "infer-content-type", verdict: Ignored, note: "new objects get the endpoint's default Content-Type"},
	{name: "log-metrics", verdict: Ignored, note: "s3csi-mounter logs no metrics summary"},
	{name: "maximum-throughput-gbps", verdict: Ignored, kind: uintValue, example: "10",
		note: "s3csi-mounter has no throughput target: max-threads bounds its concurrent requests, memory-target its buffers"},
	{name: "no-log", verdict: Ignored, note: "the mounter's log, the Mountpoint Pod's output, is what diagnoses a failed mount; it stays on"},
	{name: "otlp-endpoint", verdict: Ignored, kind: word, example: "http://collector.monitoring:4318", note: "s3csi-mounter exports no OTLP metrics"},
	{name: "otlp-export-interval", verdict: Ignored, kind: uintValue, example: "60", note: "s3csi-mounter exports no OTLP metrics"},
	{name: "storage-class", verdict: Ignored, kind: word, example: "STANDARD",
		note: "new objects get the bucket's default storage class, as under the Scality v2 driver, which dropped it"},
	{name: "transfer-acceleration", verdict: Ignored, note: "the endpoint is the driver's `s3.endpointUrl`"},
	{name: "user-agent-prefix", verdict: Ignored, kind: word, example: "my-app",
		note: "requests carry the driver's user agent (the Scality and AWS drivers replace the volume's too)"},
	{name: "version", aliases: []string{"v", "V"}, verdict: Ignored, note: processOption},

	// Options refused: they would let a volume choose the node's trust, credentials or files.
	{name: "ca-bundle", verdict: Refused, kind: anyValue,
		note: "the S3 endpoint's CA is the driver's: set it with the chart value `s3.caBundle` (or `s3.caConfigMap`), never in a volume, and remove the option"},
	{name: "endpoint-url", verdict: Refused, kind: anyValue,
		note: "the endpoint is set by the driver's configuration (the chart's `s3.endpointUrl`): remove the option, or install a driver for the other endpoint"},
	{name: "log-directory", aliases: []string{"l"}, verdict: Refused, kind: anyValue,
		note: "logs go to the Mountpoint Pod's output (`kubectl logs -n <mountpoint namespace> <pod>`), never to a node's directory: remove the option"},
	{name: "o", verdict: Refused, kind: anyValue,
		note: "raw FUSE options are set by the driver: use the named options instead (read-only, allow-other, uid, gid, dir-mode, file-mode)"},
	{name: "profile", verdict: Refused, kind: anyValue,
		note: "credentials are provided by the driver, or by the volume's secret (`authenticationSource: secret`): remove the option"},
}

// byName finds a spec by its name or an alias.
var byName = func() map[string]*spec {
	m := map[string]*spec{}
	for i := range specs {
		s := &specs[i]
		m[s.name] = s
		for _, a := range s.aliases {
			m[a] = s
		}
	}
	return m
}()

// Known returns every option the policy knows, sorted by name.
func Known() []Option {
	out := make([]Option, 0, len(specs))
	for _, s := range specs {
		out = append(out, Option{Name: s.name, Aliases: slices.Clone(s.aliases), Verdict: s.verdict,
			Value: s.valueDoc(), Example: s.example, Note: s.note})
	}
	slices.SortFunc(out, func(a, b Option) int { return strings.Compare(a.Name, b.Name) })
	return out
}
