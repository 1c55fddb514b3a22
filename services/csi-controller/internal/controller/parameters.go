package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/s3csi/s3csi/shared/volumecontext"
)

// StorageClass parameters CreateVolume accepts, besides the keys in the csi.storage.k8s.io/
// namespace that the external-provisioner owns (secret references, and the PV and PVC names
// with --extra-create-metadata), which are accepted and not used.
const (
	// ParamEmptyBucketOnDelete ("true" or "false", default "false") lets DeleteVolume delete
	// the objects left in the bucket; by default a non-empty bucket is kept and DeleteVolume
	// fails until someone empties it. It is recorded on the bucket when it is created, since
	// DeleteVolume does not receive the StorageClass parameters.
	ParamEmptyBucketOnDelete = "emptyBucketOnDelete"
)

// passThroughParams are copied to the volume context unchanged: they configure the volume's
// Mountpoint Pods on the nodes.
func passThroughParams() []string {
	return append([]string{volumecontext.KeyMountpointPodServiceAccountName}, volumecontext.ResourceKeys()...)
}

// Params are the validated StorageClass parameters of a CreateVolume request.
type Params struct {
	EmptyBucketOnDelete bool
	// PassThrough holds the parameters that go into the volume context.
	PassThrough map[string]string
}

// ParseParams validates the StorageClass parameters; an unknown key is an error (a typo such
// as "emptyBucketOndelete" must not silently keep the default), and every problem is reported
// at once.
func ParseParams(params map[string]string) (Params, error) {
	p := Params{PassThrough: map[string]string{}}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(params)) {
		v := params[k]
		switch {
		case k == ParamEmptyBucketOnDelete:
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("parameter %q: want true or false, got %q", k, v))
			}
			p.EmptyBucketOnDelete = b
		case slices.Contains(passThroughParams(), k):
			p.PassThrough[k] = v
		case volumecontext.IsKubeletKey(k):
		default:
			errs = append(errs, fmt.Errorf("unknown parameter %q; the known ones are %s and the csi.storage.k8s.io/ keys",
				k, strings.Join(append([]string{ParamEmptyBucketOnDelete}, passThroughParams()...), ", ")))
		}
	}
	// The pass-through values must be what the node will accept.
	probe := maps.Clone(p.PassThrough)
	probe[volumecontext.KeyBucketName] = "probe"
	if _, err := volumecontext.Parse(probe); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Params{}, err
	}
	return p, nil
}

// fingerprint identifies what a CreateVolume request asks for, apart from its name and
// capacity: two requests with the same name and different fingerprints are incompatible.
func fingerprint(p Params, authSource string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "empty=%t;auth=%s;", p.EmptyBucketOnDelete, authSource)
	for _, k := range slices.Sorted(maps.Keys(p.PassThrough)) {
		fmt.Fprintf(&b, "%d:%s=%d:%s;", len(k), k, len(p.PassThrough[k]), p.PassThrough[k])
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:16])
}
