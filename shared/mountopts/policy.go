// Package mountopts applies the node-agent's policy to a volume's mount options (the
// PersistentVolume's mountOptions, mount-s3 command-line options): an allow-list, checked
// values, and the options the driver adds itself.
//
// Problem: mount options are written by users who may not be trusted with the node: an
// --endpoint-url sends the driver's credentials to a chosen host, a --cache or --log-directory
// with a host path writes where it should not, and a value may smuggle a second option.
// Solution: only listed options are accepted, each value must match its pattern, and anything
// else is refused with the reason, never silently dropped.
// Invariant: the mounter only ever receives options from the allow-list, in canonical form.
//
// Two modules apply it: the node-agent to a volume's mount options (Parse), and the mounter, in
// socket mode, to the arguments and environment of every mount request it receives (CheckArgs,
// CheckEnv), so that a compromised peer on the mounter's socket cannot make it use what the
// policy refuses. Both read the lists below: there is one allow-list.
package mountopts

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// kind is what an option's value must look like.
type kind int

const (
	flag kind = iota
	uintValue
	octalMode
	word
	prefixValue
	ttlValue
	relativeName
)

// allowed lists the options users may set.
var allowed = map[string]kind{
	"allow-delete": flag, "allow-overwrite": flag, "allow-other": flag, "allow-root": flag,
	"read-only": flag, "force-path-style": flag, "requester-pays": flag, "debug": flag,
	"no-sign-request": flag, "abort-on-signal": flag,
	"uid": uintValue, "gid": uintValue, "dir-mode": octalMode, "file-mode": octalMode,
	"prefix": prefixValue, "region": word, "metadata-ttl": ttlValue, "negative-metadata-ttl": ttlValue,
	"max-threads": uintValue, "part-size": uintValue, "read-part-size": uintValue,
	"write-part-size": uintValue, "max-cache-size": uintValue, "max-memory-target": uintValue, "memory-target": uintValue,
	"sse": word, "sse-kms-key-id": word, "upload-checksums": word, "expected-bucket-owner": word,
	"cache": relativeName,
}

// forbidden explains why a known option is refused.
var forbidden = map[string]string{
	"endpoint-url":       "the endpoint is set by the driver's configuration",
	"profile":            "credentials are provided by the driver",
	"o":                  "raw FUSE options are set by the driver",
	"cache-xz":           "express one-zone caches are not supported",
	"incremental-upload": "incremental upload is not supported",
	"storage-class":      "the storage class is set by the driver's configuration",
	"log-directory":      "logs go to the Mountpoint Pod's output",
	"user-agent-prefix":  "the user agent is set by the driver",
	"foreground":         "the mounter always runs in the foreground",
	"auto-unmount":       "the node-agent unmounts",
	"ca-bundle":          "TLS trust is set by the driver's configuration",
}

var (
	wordRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/+@-]{0,255}$`)
	prefixRE = regexp.MustCompile(`^[A-Za-z0-9!_.*'()/-]+$`)
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	ttlRE    = regexp.MustCompile(`^([0-9]{1,9}|indefinite|minimal)$`)
)

// Options is a checked set of mount options in canonical form ("--name" or "--name=value").
type Options struct {
	values map[string]string
	flags  map[string]bool
}

// Parse checks every entry of a volume's mount options and returns them, or an error naming
// every refused entry. An entry is "name", "--name", "name=value" or "name value".
func Parse(entries []string) (*Options, error) {
	o := &Options{values: map[string]string{}, flags: map[string]bool{}}
	var errs []error
	for _, raw := range entries {
		if err := o.add(raw); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Options) add(raw string) error {
	entry := strings.TrimSpace(raw)
	if entry == "" {
		return nil
	}
	name := strings.TrimPrefix(strings.TrimPrefix(entry, "-"), "-")
	value, hasValue := "", false
	if i := strings.IndexAny(name, "= "); i >= 0 {
		name, value, hasValue = name[:i], name[i+1:], true
	}
	k, err := check(raw, name, value, hasValue)
	if err != nil {
		return err
	}
	if k == flag {
		o.flags[name] = true
		return nil
	}
	o.values[name] = value
	return nil
}

// check applies the allow-list to option name, written raw, and its value; it returns the
// option's kind.
func check(raw, name, value string, hasValue bool) (kind, error) {
	if why, ok := forbidden[name]; ok {
		return 0, fmt.Errorf("mount option %q is not allowed: %s", raw, why)
	}
	k, ok := allowed[name]
	if !ok {
		return 0, fmt.Errorf("mount option %q is unknown or not allowed", raw)
	}
	if k == flag {
		if hasValue {
			return 0, fmt.Errorf("mount option %q takes no value", raw)
		}
		return k, nil
	}
	if !hasValue || value == "" {
		return 0, fmt.Errorf("mount option %q needs a value", raw)
	}
	if err := checkValue(k, value); err != nil {
		return 0, fmt.Errorf("mount option %q: %w", raw, err)
	}
	return k, nil
}

// CheckArgs checks mount-s3 arguments as the node-agent renders them (Args): each one
// "--name" or "--name=value", allowed, with a value of the allowed shape, and no option twice.
// It returns an error naming every refused argument. The mounter applies it to a mount request.
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
		if _, err := check(a, name, value, hasValue); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("mount option %q is given twice", "--"+name))
		}
		seen[name] = true
	}
	return errors.Join(errs...)
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

func checkValue(k kind, v string) error {
	switch k {
	case uintValue:
		if _, err := strconv.ParseUint(v, 10, 64); err != nil {
			return errors.New("want a non-negative integer")
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
		if len(v) > 1024 || !prefixRE.MatchString(v) || strings.HasPrefix(v, "-") || !strings.HasSuffix(v, "/") {
			return errors.New("want a key prefix ending in '/' without spaces or leading '-'")
		}
	case ttlValue:
		if !ttlRE.MatchString(v) {
			return errors.New("want seconds, \"indefinite\" or \"minimal\"")
		}
	case relativeName:
		if !nameRE.MatchString(v) || v == ".." {
			return errors.New("want a directory name inside the Mountpoint Pod's cache volume, not a path")
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
// group: group ownership, allow-other, and group read/write modes, each only if absent.
func (o *Options) ApplyVolumeMountGroup(group string) error {
	if group == "" || o.Has("gid") {
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
