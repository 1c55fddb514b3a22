package mountargs

import (
	"errors"
	"fmt"
	"strings"
)

// Validate checks the rules between options that mount-s3 enforces.
func (o *Options) Validate() error {
	var errs []error
	if o.AllowOther && o.AllowRoot {
		errs = append(errs, errors.New("--allow-other and --allow-root are mutually exclusive"))
	}
	if o.SSEKMSKeyID != "" && !strings.HasPrefix(o.SSE, "aws:kms") {
		errs = append(errs, errors.New("--sse-kms-key-id needs --sse aws:kms or aws:kms:dsse"))
	}
	if o.NoSignRequest && o.Profile != "" {
		errs = append(errs, errors.New("--no-sign-request and --profile are mutually exclusive"))
	}
	if o.MaxCacheSize != nil && o.CacheDir == "" {
		errs = append(errs, errors.New("--max-cache-size needs --cache"))
	}
	if o.ReadOnly && (o.AllowDelete || o.AllowOverwrite) {
		errs = append(errs, errors.New("--read-only excludes --allow-delete and --allow-overwrite"))
	}
	if o.Bucket != "" || o.MountPoint != "" {
		if err := checkBucket(o.Bucket); err != nil {
			errs = append(errs, err)
		}
		if o.MountPoint == "" || strings.ContainsRune(o.MountPoint, 0) {
			errs = append(errs, fmt.Errorf("invalid directory %q", o.MountPoint))
		}
	}
	return errors.Join(errs...)
}

// checkBucket accepts S3 bucket names (3-63 of lowercase letters, digits, '.', '-', '_') and
// access point ARNs.
func checkBucket(b string) error {
	if strings.HasPrefix(b, "arn:") && !strings.ContainsAny(b, " \t\n\x00") {
		return nil
	}
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("invalid bucket name %q: want 3 to 63 characters", b)
	}
	for _, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' && c != '_' {
			return fmt.Errorf("invalid bucket name %q: character %q", b, c)
		}
	}
	return nil
}

// Args renders the options as `--name=value` and `--name` arguments, in a fixed order, without
// the positional arguments; ParseMountOptions(o.Args()) returns o again.
func (o *Options) Args() []string {
	var args []string
	for i := range specs {
		s := &specs[i]
		if s.flag {
			if *s.boolField(o) {
				args = append(args, "--"+s.name)
			}
			continue
		}
		if v, ok := s.render(o); ok {
			args = append(args, "--"+s.name+"="+v)
		}
	}
	return args
}

// CommandLine renders a full mount-s3 command line: Args followed by "--", BUCKET and DIRECTORY.
func (o *Options) CommandLine() []string {
	return append(o.Args(), "--", o.Bucket, o.MountPoint)
}
