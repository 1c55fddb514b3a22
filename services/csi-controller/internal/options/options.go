// Package options holds the csi-controller's command-line options: defaults, flags and the
// checks that reject a bad combination before anything starts.
package options

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/s3csi/s3csi/shared/servicecmd"
	"github.com/s3csi/s3csi/shared/version"

	"github.com/s3csi/s3csi/services/csi-controller/internal/proof"
	"github.com/s3csi/s3csi/services/csi-controller/internal/s3client"
)

// Defaults that tests and documentation refer to.
const (
	DefaultBucketPrefix        = "csi-s3-"
	DefaultCredentialsCacheTTL = 5 * time.Minute
	// MaxBucketPrefixLength leaves room in a 63-character bucket name for a readable part of
	// the volume name and the hash suffix that makes it unique.
	MaxBucketPrefixLength = 24
)

// Options configures one csi-controller process.
type Options struct {
	// CommonOptions are --admin-address, --nats-url (env NATS_URL), --kubeconfig and the
	// logging flags, shared by every service.
	servicecmd.CommonOptions
	// CSIEndpoint is the unix socket the CSI sidecars (external-provisioner) dial.
	CSIEndpoint string
	// S3Endpoint is the URL of the S3 service, e.g. https://s3.example.com. Required. Defaults
	// to $AWS_ENDPOINT_URL, the variable the Scality driver's charts set.
	S3Endpoint string
	// S3Region is the signing region when a provisioner secret names none; default $AWS_REGION,
	// else us-east-1.
	S3Region string
	// S3CABundle is a PEM file of CAs trusted for the endpoint's TLS certificate, in addition to
	// the system roots.
	S3CABundle string
	// S3PathStyle addresses buckets as <endpoint>/<bucket>; on by default, as on-premises
	// endpoints rarely have wildcard DNS for <bucket>.<host>.
	S3PathStyle bool
	// CredentialsDir holds the driver's own credentials as files named like the keys of a
	// provisioner secret (access_key_id, secret_access_key, optional session_token), e.g. a
	// mounted Secret; they are re-read when the credentials cache expires, so a rotation needs no
	// restart. Empty takes AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
	CredentialsDir string
	// CredentialsCacheTTL bounds how long an S3 client built for a set of credentials is reused.
	CredentialsCacheTTL time.Duration
	// BucketPrefix starts the name of every bucket CreateVolume makes.
	BucketPrefix string
	// OwnershipKeysDir holds the keys of the buckets' ownership proofs, one per file of at
	// least 32 bytes, e.g. a mounted Secret: the file "key" signs the buckets CreateVolume
	// makes, and every file verifies those DeleteVolume deletes, so a rotated-out key can stay
	// for the buckets it signed. Required.
	OwnershipKeysDir string
	// DriverVersion is reported by GetPluginInfo.
	DriverVersion string
}

// New returns the defaults, taking environment-provided values (NATS_URL) from the environment.
func New() *Options {
	return &Options{
		CommonOptions: servicecmd.NewCommonOptions(":8081"),
		CSIEndpoint:   "unix:///csi/csi.sock",
		S3Endpoint:    os.Getenv("AWS_ENDPOINT_URL"),
		S3Region:      os.Getenv("AWS_REGION"),
		S3PathStyle:   true,

		CredentialsCacheTTL: DefaultCredentialsCacheTTL,
		BucketPrefix:        DefaultBucketPrefix,
		DriverVersion:       version.Version,
	}
}

// AddFlags registers the options on fs, with the current values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.CommonOptions.AddFlags(fs)
	fs.StringVar(&o.CSIEndpoint, "csi-endpoint", o.CSIEndpoint, "CSI gRPC endpoint, unix:///absolute/path")
	fs.StringVar(&o.S3Endpoint, "s3-endpoint", o.S3Endpoint, "URL of the S3 service, e.g. https://s3.example.com (required; env AWS_ENDPOINT_URL)")
	fs.StringVar(&o.S3Region, "s3-region", o.S3Region, "signing region when a provisioner secret names none (env AWS_REGION; default us-east-1)")
	fs.StringVar(&o.S3CABundle, "s3-ca-bundle", o.S3CABundle, "PEM file of extra CAs trusted for the S3 endpoint's certificate")
	fs.BoolVar(&o.S3PathStyle, "s3-path-style", o.S3PathStyle, "address buckets as <endpoint>/<bucket> rather than <bucket>.<host>")
	fs.StringVar(&o.CredentialsDir, "credentials-dir", o.CredentialsDir,
		"directory holding the driver's access_key_id, secret_access_key and optional session_token files; empty reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN")
	fs.DurationVar(&o.CredentialsCacheTTL, "credentials-cache-ttl", o.CredentialsCacheTTL, "how long an S3 client built for a set of credentials is reused")
	fs.StringVar(&o.BucketPrefix, "bucket-prefix", o.BucketPrefix, "prefix of the name of every bucket CreateVolume makes")
	fs.StringVar(&o.OwnershipKeysDir, "ownership-keys-dir", o.OwnershipKeysDir,
		"directory of the buckets' ownership-proof keys, one per file of at least 32 bytes: the file key signs, every file verifies (required)")
	fs.StringVar(&o.DriverVersion, "driver-version", o.DriverVersion, "version reported by GetPluginInfo")
}

// Validate reports every invalid option at once, naming the flag to fix.
func (o *Options) Validate() error {
	errs := []error{o.CommonOptions.Validate()}
	if err := validateUnixEndpoint(o.CSIEndpoint); err != nil {
		errs = append(errs, fmt.Errorf("--csi-endpoint: %w", err))
	}
	if err := s3client.ValidateEndpointURL(o.S3Endpoint); err != nil {
		errs = append(errs, fmt.Errorf("--s3-endpoint (or AWS_ENDPOINT_URL): %w", err))
	}
	if err := validateBucketPrefix(o.BucketPrefix); err != nil {
		errs = append(errs, fmt.Errorf("--bucket-prefix: %w", err))
	}
	if err := validateOwnershipKeys(o.OwnershipKeysDir); err != nil {
		errs = append(errs, fmt.Errorf("--ownership-keys-dir: %w", err))
	}
	if o.CredentialsCacheTTL <= 0 {
		errs = append(errs, fmt.Errorf("--credentials-cache-ttl: want a positive duration, got %s", o.CredentialsCacheTTL))
	}
	if o.DriverVersion == "" {
		errs = append(errs, errors.New("--driver-version: must not be empty"))
	}
	return errors.Join(errs...)
}

// validateOwnershipKeys reads the keys now, so a missing Secret mount fails at start-up naming
// the flag. Errors name files, never contents.
func validateOwnershipKeys(dir string) error {
	if dir == "" {
		return errors.New("required: DeleteVolume deletes only the buckets whose ownership proof one of its keys verifies")
	}
	_, err := proof.LoadDir(dir)
	return err
}

// validateBucketPrefix accepts lowercase letters, digits and '-', starting with a letter or a
// digit: dots would break TLS to <bucket>.<host> endpoints, and the name built from the prefix
// must stay a valid bucket name whatever the volume name.
func validateBucketPrefix(prefix string) error {
	if len(prefix) > MaxBucketPrefixLength {
		return fmt.Errorf("want at most %d characters, got %q", MaxBucketPrefixLength, prefix)
	}
	for i, r := range prefix {
		ok := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || (r == '-' && i > 0)
		if !ok {
			return fmt.Errorf("want lowercase letters, digits and '-' (not first), got %q", prefix)
		}
	}
	for _, reserved := range []string{"xn--", "sthree-", "amzn-s3-demo-"} {
		if strings.HasPrefix(prefix, reserved) {
			return fmt.Errorf("%q would start bucket names with the reserved prefix %q", prefix, reserved)
		}
	}
	return nil
}

// validateUnixEndpoint accepts unix:///absolute/path, the only transport the CSI sidecars use.
func validateUnixEndpoint(endpoint string) error {
	p, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok || !path.IsAbs(p) || path.Clean(p) == "/" {
		return fmt.Errorf("want unix:///absolute/path/to.sock, got %q", endpoint)
	}
	return nil
}
