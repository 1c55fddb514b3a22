package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/s3csi/s3csi/shared/volumecontext"
)

// hashLength is the number of hex digits of sha256(request name) that end every bucket name.
const hashLength = 10

// BucketName derives the bucket of a CreateVolume request from its name.
//
// Problem: the external-provisioner retries CreateVolume after a timeout (10 s by default) with
// the same name; a random bucket name per call leaks one bucket per slow retry.
// Solution: the bucket name is a pure function of the request name: prefix, the name reduced
// to the bucket alphabet and truncated, and 40 bits of sha256 of the full name; two names that
// reduce to the same text ("PVC_1", "pvc-1") still get different buckets, and the bucket is
// tagged with the full name, which CreateVolume checks, so even a hash collision is detected
// rather than shared.
// Invariant: the same prefix and name always give the same valid bucket name of at most 63
// characters.
func BucketName(prefix, name string) string {
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:hashLength]
	room := volumecontext.MaxBucketNameLength - len(prefix) - len(suffix) - 1
	slug := strings.Trim(slugify(name), "-")
	if len(slug) > room {
		slug = strings.TrimRight(slug[:room], "-")
	}
	bucket := prefix + slug + "-" + suffix
	if slug == "" {
		bucket = prefix + suffix
	}
	bucket = strings.TrimLeft(bucket, "-")
	if volumecontext.ReservedBucketAffix(bucket) != nil {
		bucket = "v" + bucket[1:]
	}
	return bucket
}

// slugify lowercases name and maps every run of characters outside [a-z0-9] to one '-'.
func slugify(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return b.String()
}
