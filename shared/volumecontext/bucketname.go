package volumecontext

import (
	"fmt"
	"net"
	"strings"
)

// Bucket name limits of S3.
const (
	MinBucketNameLength = 3
	MaxBucketNameLength = 63
)

// ValidateBucketName checks name against the S3 bucket naming rules (3-63 characters of
// lowercase letters, digits, '.' and '-'; starts and ends with a letter or digit; no "..", not
// an IP address, none of the reserved prefixes and suffixes). Underscores and capitals, which
// some legacy S3 services accept, are refused: they cannot be addressed virtual-host style.
func ValidateBucketName(name string) error {
	if n := len(name); n < MinBucketNameLength || n > MaxBucketNameLength {
		return fmt.Errorf("bucket name %q must be %d to %d characters long", name, MinBucketNameLength, MaxBucketNameLength)
	}
	for i := 0; i < len(name); i++ {
		if !validBucketByte(name[i]) {
			return fmt.Errorf("bucket name %q may only hold lowercase letters, digits, '.' and '-'", name)
		}
	}
	if !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return fmt.Errorf("bucket name %q must start and end with a letter or a digit", name)
	}
	if strings.Contains(name, "..") {
		return fmt.Errorf("bucket name %q must not hold two adjacent periods", name)
	}
	if net.ParseIP(name) != nil {
		return fmt.Errorf("bucket name %q must not be an IP address", name)
	}
	if err := ReservedBucketAffix(name); err != nil {
		return err
	}
	return nil
}

// ReservedBucketAffix reports a prefix or suffix S3 reserves, which a bucket name must not use.
func ReservedBucketAffix(name string) error {
	for _, p := range []string{"xn--", "sthree-", "amzn-s3-demo-"} {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("bucket name %q must not start with the reserved prefix %q", name, p)
		}
	}
	for _, s := range []string{"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"} {
		if strings.HasSuffix(name, s) {
			return fmt.Errorf("bucket name %q must not end with the reserved suffix %q", name, s)
		}
	}
	return nil
}

func validBucketByte(b byte) bool {
	return alnum(b) || b == '.' || b == '-'
}

func alnum(b byte) bool {
	return (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9')
}
