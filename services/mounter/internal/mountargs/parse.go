package mountargs

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnknownOption is wrapped by errors for options mount-s3 does not have.
var ErrUnknownOption = errors.New("unknown option")

// Parse parses a mount-s3 command line without the program name: `[OPTIONS] BUCKET DIRECTORY`.
// Options take their value as `--name=value` or `--name value`; "--" ends the options.
func Parse(args []string) (Options, error) {
	var o Options
	var positional []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(arg, "--") || isShort(arg):
			name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
			if isShort(arg) {
				name = shortNames[name]
			}
			spec, err := lookup(name)
			if err != nil {
				return Options{}, err
			}
			if !spec.flag && !hasValue {
				if i+1 >= len(args) {
					return Options{}, fmt.Errorf("parse option --%s: missing value", name)
				}
				i++
				value, hasValue = args[i], true
			}
			if err := spec.apply(&o, name, value, hasValue); err != nil {
				return Options{}, err
			}
		case strings.HasPrefix(arg, "-") && arg != "-":
			return Options{}, fmt.Errorf("parse option %q: %w", arg, ErrUnknownOption)
		default:
			positional = append(positional, arg)
		}
	}
	if len(positional) != 2 {
		return Options{}, fmt.Errorf("parse arguments: want BUCKET DIRECTORY, got %d positional arguments", len(positional))
	}
	o.Bucket, o.MountPoint = positional[0], positional[1]
	if err := o.Validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// ParseMountOptions parses a PersistentVolume's mountOptions: each entry is one option, its
// leading "--" optional, its value after "=" or a space ("uid=1000", "--region us-east-1").
// A value-taking option may also take the next entry as its value ("--uid", "1000").
func ParseMountOptions(entries []string) (Options, error) {
	var o Options
	for i := 0; i < len(entries); i++ {
		entry := strings.TrimSpace(entries[i])
		if entry == "" {
			continue
		}
		entry = strings.TrimPrefix(entry, "--")
		name, value, hasValue := cutNameValue(entry)
		if long, ok := shortNames[strings.TrimPrefix(name, "-")]; ok {
			name = long
		}
		spec, err := lookup(name)
		if err != nil {
			return Options{}, err
		}
		if !spec.flag && !hasValue {
			if i+1 >= len(entries) {
				return Options{}, fmt.Errorf("parse option --%s: missing value", name)
			}
			i++
			value, hasValue = strings.TrimSpace(entries[i]), true
		}
		if err := spec.apply(&o, name, value, hasValue); err != nil {
			return Options{}, err
		}
	}
	if err := o.Validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// isShort reports whether arg is one of mount-s3's one-letter options: "-d", not "d" or "--d".
func isShort(arg string) bool {
	name, ok := strings.CutPrefix(arg, "-")
	return ok && shortNames[name] != ""
}

// cutNameValue splits "name=value" or "name value" at the first separator.
func cutNameValue(entry string) (name, value string, ok bool) {
	i := strings.IndexAny(entry, "= \t")
	if i < 0 {
		return entry, "", false
	}
	return entry[:i], strings.TrimSpace(entry[i+1:]), true
}

func lookup(name string) (*optionSpec, error) {
	for i := range specs {
		if specs[i].name == name {
			return &specs[i], nil
		}
	}
	return nil, fmt.Errorf("parse option --%s: %w", name, ErrUnknownOption)
}

func (s *optionSpec) apply(o *Options, name, value string, hasValue bool) error {
	if s.flag {
		if hasValue {
			return fmt.Errorf("parse option --%s: takes no value", name)
		}
		*s.boolField(o) = true
		return nil
	}
	if err := s.set(o, value); err != nil {
		return fmt.Errorf("parse option --%s: %w", name, err)
	}
	return nil
}
