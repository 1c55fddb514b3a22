// Package image builds single-layer container images from static binaries and files, without a
// container engine, as docker-archive tarballs that `ctr images import` and `podman load` accept.
package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultPath is the PATH of every image: the usual one, so a shell in a debug image finds its
// applets.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// File is one regular file copied into the image.
type File struct {
	// Path is the absolute path inside the image.
	Path string
	// Source is the file on the build host.
	Source string
}

// Symlink is one symbolic link inside the image.
type Symlink struct {
	// Path is the absolute path of the link inside the image.
	Path string
	// Target is what the link points to.
	Target string
}

// Dir is one directory created with a given mode (e.g. /tmp with 1777).
type Dir struct {
	// Path is the absolute path inside the image.
	Path string
	// Mode holds the permission bits, sticky bit included (os.ModeSticky).
	Mode os.FileMode
}

// Spec is everything an image is made of. Two builds of equal Specs over equal file contents give
// the same image digest.
type Spec struct {
	// Ref is the image reference written into the tarball, e.g. docker.io/s3csi/controller:0.1.0.
	Ref string
	// Files are copied into the single layer; their mode is 0755 when the source is executable by
	// its owner, else 0644.
	Files []File
	// Symlinks are added to the layer.
	Symlinks []Symlink
	// Dirs are created with their mode; parents of files are created 0755.
	Dirs []Dir
	// Entrypoint is the command; Entrypoint[0] must be one of Files or Symlinks. It may be empty
	// when Cmd is not: Cmd[0] is then the program.
	Entrypoint []string
	// Cmd holds the default arguments of the entrypoint, used when a container gives none.
	Cmd []string
	// UID is the default user (and group); /etc/passwd and /etc/group name it.
	UID int
	// Env holds KEY=VALUE pairs; PATH defaults to DefaultPath.
	Env []string
	// Labels are the OCI labels of the image config.
	Labels map[string]string
	// Created is the config's creation time; the commit time keeps builds reproducible.
	Created time.Time
	// Arch is the image's architecture (a GOARCH: amd64, arm64); the OS is always linux. Empty
	// means amd64, and is left out of the InputDigest so that the records of the amd64-only
	// tarballs stay valid.
	Arch string `json:",omitempty"`
}

// Validate reports a Spec that cannot make a runnable image.
func (s *Spec) Validate() error {
	if s.Ref == "" {
		return fmt.Errorf("validate spec: a reference is required")
	}
	program := s.program()
	if program == "" {
		return fmt.Errorf("validate spec %s: an entrypoint or a cmd is required", s.Ref)
	}
	if s.UID < 0 {
		return fmt.Errorf("validate spec %s: uid %d is negative", s.Ref, s.UID)
	}
	paths := map[string]bool{}
	for _, p := range s.layerPaths() {
		if !path.IsAbs(p) || path.Clean(p) != p {
			return fmt.Errorf("validate spec %s: path %q is not absolute and clean", s.Ref, p)
		}
		if paths[p] {
			return fmt.Errorf("validate spec %s: path %q given twice", s.Ref, p)
		}
		paths[p] = true
	}
	if !paths[program] {
		return fmt.Errorf("validate spec %s: program %q is not a file or symlink of the image", s.Ref, program)
	}
	for _, e := range s.Env {
		if !strings.Contains(e, "=") {
			return fmt.Errorf("validate spec %s: env %q is not KEY=VALUE", s.Ref, e)
		}
	}
	return nil
}

// arch is the image's architecture: Arch, or amd64.
func (s *Spec) arch() string {
	if s.Arch == "" {
		return "amd64"
	}
	return s.Arch
}

// program is what a container runs when it gives no command of its own: the entrypoint's first
// word, or the cmd's when there is no entrypoint.
func (s *Spec) program() string {
	switch {
	case len(s.Entrypoint) > 0:
		return s.Entrypoint[0]
	case len(s.Cmd) > 0:
		return s.Cmd[0]
	}
	return ""
}

func (s *Spec) layerPaths() []string {
	var ps []string
	for _, f := range s.Files {
		ps = append(ps, f.Path)
	}
	for _, l := range s.Symlinks {
		ps = append(ps, l.Path)
	}
	for _, d := range s.Dirs {
		ps = append(ps, d.Path)
	}
	return ps
}

// env returns the config's environment: Env, with PATH=DefaultPath unless Env sets PATH.
func (s *Spec) env() []string {
	env := slices.Clone(s.Env)
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		env = append([]string{"PATH=" + DefaultPath}, env...)
	}
	return env
}

// userName is the name /etc/passwd gives the image's user.
func (s *Spec) userName() string {
	switch s.UID {
	case 0:
		return "root"
	case 65534:
		return "nobody"
	default:
		return "nonroot"
	}
}

// InputDigest hashes the Spec and the content of every source file.
//
// Problem: compressing a 60 MB layer takes seconds, so rebuilding every image on every `make
// images` would make a no-change run slow.
// Solution: the builder records this digest beside the tarball and skips the build when it matches.
// Invariant: any change that could change the image changes this digest (the format version
// below covers changes of the builder itself).
func (s *Spec) InputDigest() (string, error) {
	h := sha256.New()
	canon := struct {
		Format  int
		Spec    *Spec
		Created string
	}{Format: 1, Spec: s, Created: s.Created.UTC().Format(time.RFC3339)}
	if err := json.NewEncoder(h).Encode(canon); err != nil {
		return "", fmt.Errorf("encode spec: %w", err)
	}
	for _, f := range s.Files {
		if err := hashFile(h, f.Source); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(w io.Writer, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("hash file: %w", err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("hash file: %w", err)
	}
	_, _ = io.WriteString(w, name+"\x00"+strconv.FormatInt(st.Size(), 10)+"\x00"+fileMode(st.Mode()).String()+"\x00")
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("hash file %s: %w", name, err)
	}
	return nil
}

// fileMode is the mode a copied file gets inside the image.
func fileMode(host os.FileMode) os.FileMode {
	if host&0o100 != 0 {
		return 0o755
	}
	return 0o644
}
