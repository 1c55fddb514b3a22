// Package mountopts applies the driver's policy to a volume's mount options (the
// PersistentVolume's mountOptions, mount-s3 command-line options): every option it knows works,
// is ignored with a warning, or is refused with the reason (options.go, the one table, which
// docs/mount-options.md shows).
//
// Problem: mount options are written by users who may not be trusted with the node: an
// --endpoint-url sends the driver's credentials to a chosen host, a --log-directory writes where
// it should not, and a value may smuggle a second option. And they were written for the Scality
// and AWS drivers, whose PersistentVolumes carry options s3csi-mounter has no use for
// (debug-crt, maximum-throughput-gbps) or spells differently (cache with a host path).
// Solution: only listed options are accepted, each value must match its pattern, anything
// unknown or refused fails with the reason, and an option that only tunes mount-s3 is dropped
// with a warning (Warnings) that the node-agent shows the workload, never silently.
// Invariant: the mounter only ever receives options that work, in canonical form.
//
// Two modules apply it: the node-agent to a volume's mount options (Parse), and the mounter, in
// socket mode, to the arguments and environment of every mount request it receives (CheckArgs,
// CheckEnv), so that a compromised peer on the mounter's socket cannot make it use what the
// policy refuses. Both read the table in options.go: there is one allow-list.
package mountopts

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var (
	wordRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/+@-]{0,255}$`)
	prefixRE = regexp.MustCompile(`^[A-Za-z0-9!_.*'()/=-]+$`)
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	pathRE   = regexp.MustCompile(`^[A-Za-z0-9._/+@:~-]{1,1000}$`)
	ttlRE    = regexp.MustCompile(`^([0-9]{1,9}|indefinite|minimal)$`)
)

// defaultCacheName names the cache of a volume whose cache path ends in no valid name ("/").
const defaultCacheName = "cache"

// Options is a checked set of mount options in canonical form ("--name" or "--name=value").
type Options struct {
	values map[string]string
	flags  map[string]bool
	// warnings say which entries were dropped or changed, and why.
	warnings []string
}

// Parse checks every entry of a volume's mount options and returns those that work, or an
// error naming every refused entry. An entry is "name", "--name", "name=value" or "name value";
// a short alias may be written "-d" or "d". Entries the policy ignores are dropped, and each
// dropped or changed entry adds a warning (Warnings).
func Parse(entries []string) (*Options, error) {
	o := &Options{values: map[string]string{}, flags: map[string]bool{}}
	var errs []error
	for _, raw := range entries {
		if err := o.add(raw); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = o.checkTogether()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

// checkTogether applies the rules between options that mount-s3 enforces, so that a volume
// breaking one fails its publish with the reason rather than its mount in the Mountpoint Pod.
func (o *Options) checkTogether() []error {
	var errs []error
	if o.flags["allow-other"] && o.flags["allow-root"] {
		errs = append(errs, errors.New("mount options allow-other and allow-root exclude each other: keep allow-other, which lets root in too"))
	}
	if _, ok := o.values["sse-kms-key-id"]; ok && !strings.HasPrefix(o.values["sse"], "aws:kms") {
		errs = append(errs, errors.New("mount option sse-kms-key-id needs sse aws:kms or aws:kms:dsse"))
	}
	if _, ok := o.values["max-cache-size"]; ok && o.values["cache"] == "" {
		errs = append(errs, errors.New("mount option max-cache-size needs cache"))
	}
	return errs
}

// Warnings returns, in the order of the entries, what Parse dropped or changed and why, e.g.
// `mount option "debug-crt" is ignored: s3csi-mounter has no AWS Common Runtime ...`.
func (o *Options) Warnings() []string { return slices.Clone(o.warnings) }

func (o *Options) add(raw string) error {
	entry := strings.TrimSpace(raw)
	if entry == "" {
		return nil
	}
	name := strings.TrimPrefix(strings.TrimPrefix(entry, "-"), "-")
	value, hasValue := "", false
	if i := strings.IndexAny(name, "= "); i >= 0 {
		name, value, hasValue = name[:i], strings.TrimSpace(name[i+1:]), true
	}
	s, err := check(raw, name, value, hasValue)
	if err != nil {
		return err
	}
	if s.verdict == Ignored {
		o.warnings = append(o.warnings, fmt.Sprintf("mount option %q is ignored: %s", entry, s.note))
		return nil
	}
	if s.kind == noValue {
		o.flags[s.name] = true
		return nil
	}
	value, warning := adjust(s.kind, value)
	if warning != "" {
		o.warnings = append(o.warnings, fmt.Sprintf("mount option %q %s", entry, warning))
	}
	if value == "" {
		delete(o.values, s.name) // the last entry counts: the default, not an earlier value
		return nil
	}
	o.values[s.name] = value
	return nil
}

// check applies the policy to option name (or an alias), written raw, and its value; it returns
// the option's spec.
func check(raw, name, value string, hasValue bool) (*spec, error) {
	s, ok := byName[name]
	if !ok {
		return nil, fmt.Errorf("mount option %q is unknown or not allowed: docs/mount-options.md lists the options s3csi accepts", raw)
	}
	if s.verdict == Refused {
		return nil, fmt.Errorf("mount option %q is not allowed: %s", raw, s.note)
	}
	if s.verdict == Ignored && (s.kind == noValue || !hasValue) {
		// Dropped whatever it holds; the Scality v2 driver's own tests write "--cache-xz" bare.
		return s, nil
	}
	if s.kind == noValue {
		if hasValue {
			return nil, fmt.Errorf("mount option %q takes no value", raw)
		}
		return s, nil
	}
	if !hasValue || value == "" {
		return nil, fmt.Errorf("mount option %q needs a value", raw)
	}
	if err := s.checkValue(value); err != nil {
		return nil, fmt.Errorf("mount option %q: %w", raw, err)
	}
	return s, nil
}

// adjust returns the value of a checked option as the mounter gets it ("" to drop the option)
// and, when that differs from value, a warning saying what changed.
func adjust(k kind, value string) (string, string) {
	switch {
	case k == cacheValue && strings.Contains(value, "/"):
		name := path.Base(value)
		if !nameRE.MatchString(name) {
			name = defaultCacheName
		}
		return name, fmt.Sprintf("names the cache %q: the Mountpoint Pod caches in a directory of its own, "+
			"never in %s on the node (the Scality and AWS drivers did not use the path either)", name, value)
	case k == checksumValue && value == "crc64nvme":
		return "", "is changed to the default, crc32c: s3csi-mounter does not compute CRC64NVME checksums"
	}
	return value, ""
}

// CheckArgs checks mount-s3 arguments as the node-agent renders them (Args): each one
// "--name" or "--name=value", an option that works, with a value the node-agent sends
// unchanged, and no option twice. It returns an error naming every refused argument. The
// mounter applies it to a mount request.
func CheckArgs(args []string) error {
	var errs []error
	seen := map[string]bool{}
	for _, a := range args {
		rest, ok := strings.CutPrefix(a, "--")
		if !ok {
			errs = append(errs, fmt.Errorf("mount argument %q is not of the form --name or --name=value", a))
			continue
		}
		name, value, hasValue := strings.Cut(rest, "=")
		s, err := check(a, name, value, hasValue)
		switch {
		case err != nil:
			errs = append(errs, err)
			continue
		case s.name != name:
			errs = append(errs, fmt.Errorf("mount option %q is not in canonical form: want --%s", a, s.name))
			continue
		case s.verdict != Works:
			errs = append(errs, fmt.Errorf("mount option %q is not allowed: the node-agent drops it: %s", a, s.note))
			continue
		}
		if v, warning := adjust(s.kind, value); s.kind != noValue && (warning != "" || v != value) {
			errs = append(errs, fmt.Errorf("mount option %q is not allowed: the node-agent never sends this value (%s)", a, refusedValue(s.kind)))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("mount option %q is given twice", "--"+name))
		}
		seen[name] = true
	}
	return errors.Join(errs...)
}

// refusedValue says why CheckArgs refuses a value that Parse would have changed.
func refusedValue(k kind) string {
	if k == cacheValue {
		return "a mount request names a cache, not a path"
	}
	return "it sends the default instead"
}

// allowedEnv lists, sorted, the environment variables a mount request may set for the
// mounter's S3 client: what the node-agent sends (services/node-agent/internal/csi, Server.env),
// the profile it writes into the comm dir and the region and endpoint of the driver's
// configuration. Anything else (AWS_CA_BUNDLE, AWS_SHARED_CREDENTIALS_FILE, AWS_ACCESS_KEY_ID,
// ...) would let a request choose the client's trust, credentials or files, which only the
// driver sets. Values are not checked: the mounter cannot tell the driver's endpoint from
// another, so AWS_ENDPOINT_URL stays as trusted as the peer that sends it.
var allowedEnv = []string{"AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_REGION"}

// CheckEnv checks a mount request's environment: each entry "NAME=value" with NAME in
// allowedEnv. It returns an error naming every refused entry.
func CheckEnv(env []string) error {
	var errs []error
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("environment entry %q is not of the form NAME=value", kv))
		case !slices.Contains(allowedEnv, name):
			errs = append(errs, fmt.Errorf("environment variable %q is not allowed: only %s are accepted",
				name, strings.Join(allowedEnv, ", ")))
		}
	}
	return errors.Join(errs...)
}

func (s *spec) checkValue(v string) error {
	switch s.kind {
	case noValue, anyValue:
	case uintValue:
		n, err := strconv.ParseUint(v, 10, 64)
		switch {
		case err != nil:
			return errors.New("want a non-negative integer")
		case n < s.min || (s.max != 0 && n > s.max):
			return fmt.Errorf("want an integer from %d to %d", s.min, cmp.Or(s.max, math.MaxUint64))
		}
	case enumValue:
		if !slices.Contains(s.values, v) {
			return fmt.Errorf("want one of %s", strings.Join(s.values, ", "))
		}
	case octalMode:
		if n, err := strconv.ParseUint(v, 8, 32); err != nil || n > 0o777 {
			return errors.New("want an octal mode up to 777")
		}
	case word:
		if !wordRE.MatchString(v) {
			return errors.New("value has characters that are not allowed")
		}
	case prefixValue:
		if len(v) > 1024 || !prefixRE.MatchString(v) || strings.HasPrefix(v, "-") || strings.HasPrefix(v, "/") || !strings.HasSuffix(v, "/") {
			return errors.New("want a key prefix ending in '/' without spaces or a leading '-' or '/'")
		}
	case ttlValue:
		if !ttlRE.MatchString(v) {
			return errors.New("want seconds, \"indefinite\" or \"minimal\"")
		}
	case cacheValue:
		if !nameRE.MatchString(v) && (!strings.Contains(v, "/") || !pathRE.MatchString(v)) {
			return errors.New("want a cache name, or a path without spaces whose last element names it")
		}
	case checksumValue:
		if v != "crc32c" && v != "off" && v != "crc64nvme" {
			return errors.New("want crc32c, off or crc64nvme")
		}
	}
	return nil
}

// Has reports whether option name is set.
func (o *Options) Has(name string) bool {
	_, v := o.values[name]
	return v || o.flags[name]
}

// SetIfAbsent sets name (a flag when value is "") unless it is set already.
func (o *Options) SetIfAbsent(name, value string) {
	if o.Has(name) {
		return
	}
	if value == "" {
		o.flags[name] = true
		return
	}
	o.values[name] = value
}

// Args returns the options as sorted mount-s3 arguments.
func (o *Options) Args() []string {
	args := make([]string, 0, len(o.values)+len(o.flags))
	for name := range o.flags {
		args = append(args, "--"+name)
	}
	for name, v := range o.values {
		args = append(args, "--"+name+"="+v)
	}
	slices.Sort(args)
	return args
}

// ApplyVolumeMountGroup gives the workloads' fsGroup access when the user did not choose a
// group: group ownership, allow-other, and group read/write modes, each only if absent. Without
// an fsGroup the files' group is 0, as under the Scality driver, whose Mountpoint Pods run in
// group 0, not the group the mounter runs as: a workload keeps the ownership it saw there.
func (o *Options) ApplyVolumeMountGroup(group string) error {
	if o.Has("gid") {
		return nil
	}
	if group == "" {
		o.SetIfAbsent("gid", DefaultGID)
		return nil
	}
	if _, err := strconv.ParseUint(group, 10, 32); err != nil {
		return fmt.Errorf("volume mount group %q is not a numeric group id", group)
	}
	o.SetIfAbsent("gid", group)
	o.SetIfAbsent("allow-other", "")
	o.SetIfAbsent("dir-mode", "770")
	o.SetIfAbsent("file-mode", "660")
	return nil
}

// DefaultGID is the files' group of a volume that sets no gid, mounted for a workload without
// an fsGroup (ApplyVolumeMountGroup).
const DefaultGID = "0"

// ApplyDefaults adds what the driver always sets: read-only when asked, allow-root when
// allow-other is absent (the node-agent's own checks run as root), path-style addressing.
// A read-only mount drops allow-delete and allow-overwrite, which mount-s3 refuses beside
// read-only: the access mode wins over the PersistentVolume's write permissions.
func (o *Options) ApplyDefaults(readOnly bool) {
	if readOnly || o.flags["read-only"] {
		o.SetIfAbsent("read-only", "")
		delete(o.flags, "allow-delete")
		delete(o.flags, "allow-overwrite")
	}
	if !o.Has("allow-other") {
		o.SetIfAbsent("allow-root", "")
	}
	o.SetIfAbsent("force-path-style", "")
}
