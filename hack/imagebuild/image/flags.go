package image

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// specFlags are the command-line flags that describe a Spec.
type specFlags struct {
	ref, created                                    string
	uid                                             int
	files, symlinks, dirs, entrypoint, cmd, env, lb listFlag
}

// AddSpecFlags registers the flags of a Spec on fs and returns a function that builds the Spec
// once fs is parsed.
func AddSpecFlags(fs *flag.FlagSet) func() (*Spec, error) {
	f := &specFlags{}
	fs.StringVar(&f.ref, "ref", "", "image reference, e.g. docker.io/s3csi/controller:0.1.0")
	fs.StringVar(&f.created, "created", "", "creation time (RFC 3339), e.g. the commit time")
	fs.IntVar(&f.uid, "user", 0, "default uid (and gid) of the image")
	fs.Var(&f.files, "file", "IMAGE_PATH=HOST_PATH: copy a file into the image (repeatable)")
	fs.Var(&f.symlinks, "symlink", "IMAGE_PATH=TARGET: add a symbolic link (repeatable)")
	fs.Var(&f.dirs, "dir", "IMAGE_PATH=OCTAL_MODE: add a directory, e.g. /tmp=1777 (repeatable)")
	fs.Var(&f.entrypoint, "entrypoint", "entrypoint word; the first is the program (repeatable)")
	fs.Var(&f.cmd, "cmd", "default argument of the entrypoint (repeatable)")
	fs.Var(&f.env, "env", "KEY=VALUE in the image config (repeatable; PATH has a default)")
	fs.Var(&f.lb, "label", "KEY=VALUE label of the image config (repeatable)")
	return f.spec
}

func (f *specFlags) spec() (*Spec, error) {
	s := &Spec{Ref: f.ref, UID: f.uid, Entrypoint: f.entrypoint, Cmd: f.cmd, Env: f.env, Labels: map[string]string{}}
	if f.created == "" {
		return nil, fmt.Errorf("parse flags: -created is required (reproducible builds)")
	}
	created, err := time.Parse(time.RFC3339, f.created)
	if err != nil {
		return nil, fmt.Errorf("parse -created: %w", err)
	}
	s.Created = created
	for _, v := range f.files {
		k, src, err := pair("file", v)
		if err != nil {
			return nil, err
		}
		s.Files = append(s.Files, File{Path: k, Source: src})
	}
	for _, v := range f.symlinks {
		k, target, err := pair("symlink", v)
		if err != nil {
			return nil, err
		}
		s.Symlinks = append(s.Symlinks, Symlink{Path: k, Target: target})
	}
	for _, v := range f.dirs {
		k, m, err := pair("dir", v)
		if err != nil {
			return nil, err
		}
		mode, err := strconv.ParseUint(m, 8, 32)
		if err != nil || mode > 0o1777 {
			return nil, fmt.Errorf("parse -dir %s: mode %q is not an octal mode up to 1777", v, m)
		}
		fm := os.FileMode(mode & 0o777)
		if mode&0o1000 != 0 {
			fm |= os.ModeSticky
		}
		s.Dirs = append(s.Dirs, Dir{Path: k, Mode: fm})
	}
	for _, v := range f.lb {
		k, val, err := pair("label", v)
		if err != nil {
			return nil, err
		}
		s.Labels[k] = val
	}
	return s, s.Validate()
}

func pair(flagName, v string) (string, string, error) {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("parse -%s %q: want KEY=VALUE", flagName, v)
	}
	return k, val, nil
}
