// Package mountargs parses and renders mount-s3's command line for s3csi-mounter, the Mountpoint
// Pod's mounter. The driver's mount-option policy (shared/mountopts), which the node-agent
// applies to a volume's options and the mounter to every mount request, is checked against it by
// a test (internal/mounter): every option the policy lets through parses here.
//
// Two input forms exist. A command line (Parse) is `[OPTIONS] BUCKET DIRECTORY` as mount-s3
// accepts it. A PersistentVolume's mountOptions (ParseMountOptions) are options only, each entry
// possibly without its leading "--" and possibly holding "name value" or "name=value".
// Unknown options are an error in both forms: a typo must not silently change semantics.
package mountargs

import (
	"time"
)

// TTL is a metadata time-to-live: a duration, or one of mount-s3's named values.
type TTL struct {
	// Duration is the time-to-live when neither Indefinite nor Minimal is set.
	Duration time.Duration
	// Indefinite caches metadata until the mount ends ("indefinite").
	Indefinite bool
	// Minimal keeps only what is needed for consistency ("minimal").
	Minimal bool
}

// Options are mount-s3's options. A pointer field is nil when the option was not given, so a
// renderer and a policy can tell "not set" from "set to the zero value".
type Options struct {
	// Bucket and MountPoint are the positional arguments of a command line; empty for mountOptions.
	Bucket, MountPoint string

	// Prefix roots the view at a key prefix ending in "/".
	Prefix string
	// Region is the bucket's region.
	Region string
	// EndpointURL is the S3 endpoint, e.g. http://127.0.0.1:9000.
	EndpointURL string
	// ForcePathStyle addresses the bucket in the path rather than the host name.
	ForcePathStyle bool
	// Profile selects a profile in the shared AWS config and credentials files.
	Profile string
	// NoSignRequest sends anonymous requests; credentials are not loaded.
	NoSignRequest bool
	// RequesterPays sets x-amz-request-payer on requests.
	RequesterPays bool
	// ExpectedBucketOwner is the account the bucket must belong to.
	ExpectedBucketOwner string

	// ReadOnly refuses every modification with EROFS.
	ReadOnly bool
	// AllowDelete permits unlink of objects.
	AllowDelete bool
	// AllowOverwrite permits replacing an existing object through O_TRUNC.
	AllowOverwrite bool
	// AllowOther lets every local user access the mount.
	AllowOther bool
	// AllowRoot lets root access the mount in addition to the mounting user.
	AllowRoot bool
	// AutoUnmount asks the kernel to unmount when the mounter exits.
	AutoUnmount bool
	// AbortOnSignal fails a file whose writer got a signal while writing or closing it, so that
	// a writer killed in the middle of a file does not store what it wrote so far.
	AbortOnSignal bool

	// UID and GID own every file and directory.
	UID, GID *uint32
	// DirMode and FileMode are the permission bits of directories and files.
	DirMode, FileMode *uint32

	// MetadataTTL is how long looked-up metadata is trusted.
	MetadataTTL *TTL
	// NegativeMetadataTTL is how long a missing name is trusted to stay missing.
	NegativeMetadataTTL *TTL
	// CacheDir enables a local data cache in this directory.
	CacheDir string
	// MaxCacheSize bounds the data cache in MiB.
	MaxCacheSize *uint64
	// MaxMemoryTarget bounds the memory used for data buffers, in MiB.
	MaxMemoryTarget *uint64
	// MemoryTarget is the process's whole memory target, in MiB (mount-s3 1.24's
	// --memory-target): data buffers get what the rest of the process leaves of it.
	MemoryTarget *uint64

	// PartSize sets both ReadPartSize and WritePartSize unless those are given, in bytes.
	PartSize *uint64
	// ReadPartSize is the size of one ranged GET, in bytes.
	ReadPartSize *uint64
	// WritePartSize is the size of one multipart upload part, in bytes.
	WritePartSize *uint64
	// MaxThreads bounds the concurrent S3 requests.
	MaxThreads *int

	// StorageClass is the storage class of new objects.
	StorageClass string
	// SSE is the server-side encryption of new objects: "AES256", "aws:kms" or "aws:kms:dsse".
	SSE string
	// SSEKMSKeyID is the KMS key for "aws:kms" encryption.
	SSEKMSKeyID string
	// UploadChecksums is "crc32c" (default), "off" or "crc64nvme" (s3fs sends CRC32C for it).
	UploadChecksums string
	// UserAgentPrefix is prepended to the User-Agent of requests.
	UserAgentPrefix string

	// Foreground keeps the mounter in the foreground (always true for s3csi-mounter).
	Foreground bool
	// Debug enables debug logging: s3fs's S3 client logs each request it retries.
	Debug bool

	// MaxAttempts is the number of attempts of each S3 request, the first included: the Scality
	// and AWS drivers' --aws-max-attempts, which they hand mount-s3 as AWS_MAX_ATTEMPTS.
	MaxAttempts *int
	// CABundle is a PEM file of the CAs trusted for the endpoint, instead of the system's.
	CABundle string

	// The options below are mount-s3's and parse, but s3fs has no use for them (Ignored).

	// DebugCRT enables the AWS Common Runtime's debug logging.
	DebugCRT bool
	// NoLog disables logging.
	NoLog bool
	// LogDirectory is where mount-s3 writes its log files.
	LogDirectory string
	// LogMetrics logs a summary of performance metrics.
	LogMetrics bool
	// OTLPEndpoint receives metrics over OTLP; OTLPExportInterval is their period, in seconds.
	OTLPEndpoint       string
	OTLPExportInterval *uint64
	// MaximumThroughputGbps is mount-s3's throughput target.
	MaximumThroughputGbps *uint64
	// DualStack and TransferAcceleration choose AWS endpoint variants.
	DualStack, TransferAcceleration bool
	// BucketType is "general-purpose" or "directory" (S3 Express One Zone).
	BucketType string
	// Bind names a network interface for S3 connections.
	Bind string
	// CacheBlockSize is the disk cache's block size, in KiB.
	CacheBlockSize *uint64
	// CacheXZ is an S3 Express One Zone bucket used as a shared cache.
	CacheXZ string
	// IncrementalUpload allows appending to existing objects.
	IncrementalUpload bool
	// InferContentType sets new objects' Content-Type from their file extension.
	InferContentType bool
}

// IgnoredOption is an option that is set and that s3fs does not honor.
type IgnoredOption struct {
	// Name is the option, with "--"; Reason says why it has no effect.
	Name, Reason string
}

// Ignored returns the options that are set and that s3fs does not honor, in Args order, so
// that a mount can say so: mount-s3's command line parses, but does not do everything it would.
func (o *Options) Ignored() []IgnoredOption {
	var out []IgnoredOption
	for i := range specs {
		s := &specs[i]
		if s.ignored == "" {
			continue
		}
		if set := (s.flag && *s.boolField(o)) || (!s.flag && isSet(s, o)); set {
			out = append(out, IgnoredOption{Name: "--" + s.name, Reason: s.ignored})
		}
	}
	if o.UploadChecksums == "crc64nvme" {
		out = append(out, IgnoredOption{Name: "--upload-checksums=crc64nvme", Reason: "uploads carry CRC32C checksums: s3fs does not compute CRC64NVME"})
	}
	return out
}

func isSet(s *optionSpec, o *Options) bool {
	_, ok := s.render(o)
	return ok
}

// EffectiveReadPartSize is ReadPartSize, else PartSize, else def.
func (o *Options) EffectiveReadPartSize(def uint64) uint64 {
	return firstSet(def, o.ReadPartSize, o.PartSize)
}

// EffectiveWritePartSize is WritePartSize, else PartSize, else def.
func (o *Options) EffectiveWritePartSize(def uint64) uint64 {
	return firstSet(def, o.WritePartSize, o.PartSize)
}

func firstSet(def uint64, vals ...*uint64) uint64 {
	for _, v := range vals {
		if v != nil {
			return *v
		}
	}
	return def
}
