// Package kubenames validates the Kubernetes names and UIDs that reach a service from outside
// its process: event payloads, volume contexts and objects read from the API server.
//
// Problem: such a name is often joined into a host path (a source dir, a pod's comm dir) by a
// process running as root, so "../.." or a "/" in it would reach outside the driver's dirs.
// Solution: validate every such name where it is decoded, with the rules the API server
// applies to the object it names.
// Invariant: a name that passes is one path element: never empty, ".", "..", and never holding
// '/' or a NUL byte.
package kubenames

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrInvalid is wrapped by every validation failure of this package.
var ErrInvalid = errors.New("invalid name")

// uidRE is the canonical, lowercase text form of a UUID: what the API server puts in
// metadata.uid.
var uidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Node checks a node name: a DNS subdomain (RFC 1123).
func Node(s string) error { return subdomain("node name", s) }

// PV checks a PersistentVolume name: a DNS subdomain.
func PV(s string) error { return subdomain("PersistentVolume name", s) }

// Pod checks a pod name: a DNS subdomain.
func Pod(s string) error { return subdomain("pod name", s) }

// Object checks the name of any other object whose kind takes DNS subdomain names, such as a
// MountpointS3PodAttachment.
func Object(s string) error { return subdomain("object name", s) }

// Namespace checks a namespace name: a DNS label (RFC 1123).
func Namespace(s string) error {
	if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 {
		return fmt.Errorf("%w: namespace %q: %s", ErrInvalid, s, strings.Join(msgs, "; "))
	}
	return nil
}

// UID checks an object UID: a UUID in lowercase canonical form.
func UID(s string) error {
	if !uidRE.MatchString(s) {
		return fmt.Errorf("%w: UID %q is not a lowercase UUID", ErrInvalid, s)
	}
	return nil
}

func subdomain(what, s string) error {
	if msgs := validation.IsDNS1123Subdomain(s); len(msgs) > 0 {
		return fmt.Errorf("%w: %s %q: %s", ErrInvalid, what, s, strings.Join(msgs, "; "))
	}
	return nil
}
