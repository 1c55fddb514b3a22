// Package proof signs what the csi-controller records on a bucket it creates, so that
// DeleteVolume can tell its own buckets from buckets that only carry its tags.
//
// Problem: bucket tags are written by anyone allowed to tag the bucket; a tag saying "s3csi
// created this for volume X" proves nothing, and DeleteVolume deletes (and may empty) what it
// believes it created.
// Solution: CreateVolume records an HMAC-SHA256, under a key only the csi-controller holds, over
// the bucket name and every other tag it writes; DeleteVolume recomputes it and compares in
// constant time.
// Invariant: without a key, a valid proof for a bucket cannot be made, and a proof copied from
// another bucket, or from other tag values, does not verify.
package proof

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// MinKeyLength is the shortest key accepted, in bytes: 256 bits when the bytes are random,
// and still far beyond guessing when they are the 64 letters and digits the chart generates.
const MinKeyLength = 32

// domain starts every signed message, so a MAC made by this key for another purpose never
// passes as an ownership proof; v1 names the encoding below.
const domain = "s3csi.scality.com/ownership-proof/v1"

// Keys signs with its first key and verifies with every key, so that a new key can sign new
// buckets while the buckets signed with an earlier one stay deletable.
type Keys struct {
	keys [][]byte
}

// NewKeys returns the keys, the first of which signs; it refuses none and a short key.
func NewKeys(keys ...[]byte) (*Keys, error) {
	if len(keys) == 0 {
		return nil, errors.New("no ownership key")
	}
	k := &Keys{}
	for i, key := range keys {
		if len(key) < MinKeyLength {
			return nil, fmt.Errorf("ownership key %d is %d bytes, want at least %d", i+1, len(key), MinKeyLength)
		}
		k.keys = append(k.keys, append([]byte(nil), key...))
	}
	return k, nil
}

// ReadKeyFile returns the key held in file, without trailing whitespace (a Secret written with
// `echo` ends in a newline). Its errors name the file, never its content.
func ReadKeyFile(file string) ([]byte, error) {
	b, err := os.ReadFile(file) //nolint:gosec // the path is an operator's flag, not untrusted input
	if err != nil {
		return nil, fmt.Errorf("read ownership key: %w", err)
	}
	key := []byte(strings.TrimRight(string(b), " \t\r\n"))
	if len(key) < MinKeyLength {
		return nil, fmt.Errorf("read ownership key %s: %d bytes, want at least %d", file, len(key), MinKeyLength)
	}
	return key, nil
}

// SigningKeyFile is the file of a keys directory whose key signs.
const SigningKeyFile = "key"

// LoadDir reads the keys of dir, e.g. a mounted Secret: the file SigningKeyFile signs, and every
// other file verifies (keys kept after a rotation, under any name). Names starting with '.' are
// skipped: a mounted Secret keeps its versions in such entries.
func LoadDir(dir string) (*Keys, error) {
	signing, err := ReadKeyFile(filepath.Join(dir, SigningKeyFile))
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read ownership keys: %w", err)
	}
	keys := [][]byte{signing}
	for _, e := range entries { // sorted by name
		if e.Name() == SigningKeyFile || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		file := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(file); err == nil && fi.IsDir() {
			continue
		}
		k, err := ReadKeyFile(file)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return NewKeys(keys...)
}

// Sign returns the proof of fields, as 64 hex digits (a valid S3 tag value), made with the
// first key.
func (k *Keys) Sign(fields ...string) string {
	return hex.EncodeToString(mac(k.keys[0], fields))
}

// Verify reports whether proof is the proof of fields under any of the keys. A proof that is
// not 64 hex digits never verifies.
func (k *Keys) Verify(proof string, fields ...string) bool {
	got, err := hex.DecodeString(proof)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	for _, key := range k.keys {
		if hmac.Equal(got, mac(key, fields)) {
			return true
		}
	}
	return false
}

// mac encodes every field with its length first, so that no two lists of fields give the
// same message ("ab","c" and "a","bc" differ).
func mac(key []byte, fields []string) []byte {
	h := hmac.New(sha256.New, key)
	msg := binary.AppendUvarint([]byte(domain), uint64(len(fields)))
	for _, f := range fields {
		msg = binary.AppendUvarint(msg, uint64(len(f)))
		msg = append(msg, f...)
	}
	h.Write(msg)
	return h.Sum(nil)
}
