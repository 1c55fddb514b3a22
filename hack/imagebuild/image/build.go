package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layerTime is the modification time of every entry of the layer: fixed, so equal inputs give an
// equal layer digest whatever the build host's file times.
var layerTime = time.Unix(0, 0).UTC()

// Result says what Build did.
type Result struct {
	// Digest is the image's config digest (its image ID).
	Digest v1.Hash
	// Size is the tarball's size in bytes.
	Size int64
	// Unchanged is true when the tarball was already up to date and left as it was.
	Unchanged bool
}

// inputsPath is where Build records the InputDigest of the tarball at out.
func inputsPath(out string) string { return out + ".inputs" }

// Build writes the image of s to out as a docker-archive tarball, unless the digest recorded
// beside out shows out was built from the same inputs.
func Build(s *Spec, out string) (Result, error) {
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	inputs, err := s.InputDigest()
	if err != nil {
		return Result{}, err
	}
	if recorded, err := os.ReadFile(inputsPath(out)); err == nil && string(recorded) == inputs {
		if img, err := Read(out, s.Ref); err == nil {
			st, statErr := os.Stat(out)
			digest, digestErr := img.ConfigName()
			if err := errors.Join(statErr, digestErr); err == nil {
				return Result{Digest: digest, Size: st.Size(), Unchanged: true}, nil
			}
		}
	}
	img, err := Image(s)
	if err != nil {
		return Result{}, err
	}
	tag, err := name.NewTag(s.Ref, name.StrictValidation)
	if err != nil {
		return Result{}, fmt.Errorf("parse reference %s: %w", s.Ref, err)
	}
	// The recorded digest goes first and the tarball is renamed into place, so an interrupted
	// build never leaves a stale tarball that looks up to date.
	_ = os.Remove(inputsPath(out))
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		_ = os.Remove(tmp)
		return Result{}, fmt.Errorf("write image %s: %w", s.Ref, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return Result{}, fmt.Errorf("write image %s: %w", s.Ref, err)
	}
	if err := os.WriteFile(inputsPath(out), []byte(inputs), 0o644); err != nil {
		return Result{}, fmt.Errorf("record inputs of %s: %w", s.Ref, err)
	}
	st, err := os.Stat(out)
	if err != nil {
		return Result{}, fmt.Errorf("write image %s: %w", s.Ref, err)
	}
	digest, err := img.ConfigName()
	if err != nil {
		return Result{}, fmt.Errorf("digest image %s: %w", s.Ref, err)
	}
	return Result{Digest: digest, Size: st.Size()}, nil
}

// Image assembles the image of s in memory: an empty base and one layer, with Docker's media
// types (a docker-archive tarball records none; `ctr import` and `podman load` expect them).
func Image(s *Spec) (v1.Image, error) { return assemble(s, false) }

// OCIImage assembles the image of s as Image does, with OCI media types for its manifest, config
// and layer, as an OCI image index and layout require.
func OCIImage(s *Spec) (v1.Image, error) { return assemble(s, true) }

func assemble(s *Spec, oci bool) (v1.Image, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	content, err := Layer(s)
	if err != nil {
		return nil, err
	}
	layerOpts := []tarball.LayerOption{tarball.WithCompressedCaching}
	if oci {
		layerOpts = append(layerOpts, tarball.WithMediaType(types.OCILayer))
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(content)), nil
	}, layerOpts...)
	if err != nil {
		return nil, fmt.Errorf("compress layer of %s: %w", s.Ref, err)
	}
	created := v1.Time{Time: s.Created.UTC()}
	cfg := &v1.ConfigFile{
		Architecture: s.arch(),
		OS:           "linux",
		Created:      created,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: s.Entrypoint,
			Cmd:        s.Cmd,
			User:       strconv.Itoa(s.UID),
			Env:        s.env(),
			WorkingDir: "/",
			Labels:     s.Labels,
		},
	}
	base, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, fmt.Errorf("configure %s: %w", s.Ref, err)
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: created, CreatedBy: "s3csi imagebuild", Comment: s.Ref},
	})
	if err != nil {
		return nil, fmt.Errorf("add layer to %s: %w", s.Ref, err)
	}
	if oci {
		img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	}
	return img, nil
}

// entry is one member of the layer before it is written.
type entry struct {
	hdr    tar.Header
	source string // for regular files
	data   []byte // for generated files
}

// Layer returns the uncompressed layer tar of s: its files, symlinks and directories, the parent
// directories they need, and /etc/passwd and /etc/group naming root and the image's user.
func Layer(s *Spec) ([]byte, error) {
	entries := map[string]*entry{}
	add := func(e *entry) {
		e.hdr.Uid, e.hdr.Gid = 0, 0
		e.hdr.ModTime = layerTime
		e.hdr.Format = tar.FormatPAX
		entries[e.hdr.Name] = e
	}
	for _, d := range s.Dirs {
		add(&entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: d.Path, Mode: tarMode(d.Mode)}})
	}
	for _, l := range s.Symlinks {
		add(&entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: l.Path, Linkname: l.Target, Mode: 0o777}})
	}
	for _, f := range s.Files {
		st, err := os.Stat(f.Source)
		if err != nil {
			return nil, fmt.Errorf("add %s to %s: %w", f.Path, s.Ref, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("add %s to %s: %s is not a regular file", f.Path, s.Ref, f.Source)
		}
		add(&entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: f.Path, Mode: int64(fileMode(st.Mode())), Size: st.Size()}, source: f.Source})
	}
	for p, data := range s.accounts() {
		if _, ok := entries[p]; !ok {
			add(&entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o644, Size: int64(len(data))}, data: data})
		}
	}
	for p := range entries {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				add(&entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}})
			}
		}
	}
	names := make([]string, 0, len(entries))
	for p := range entries {
		names = append(names, p)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		e := entries[p]
		hdr := e.hdr
		hdr.Name = p[1:]
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, fmt.Errorf("write layer entry %s: %w", p, err)
		}
		if err := writeContent(tw, e); err != nil {
			return nil, fmt.Errorf("write layer entry %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer of %s: %w", s.Ref, err)
	}
	return buf.Bytes(), nil
}

func writeContent(w io.Writer, e *entry) error {
	switch {
	case e.data != nil:
		_, err := w.Write(e.data)
		return err
	case e.source != "":
		f, err := os.Open(e.source)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		n, err := io.Copy(w, f)
		if err == nil && n != e.hdr.Size {
			err = fmt.Errorf("%s changed size while being copied", e.source)
		}
		return err
	}
	return nil
}

// tarMode converts an os.FileMode (with os.ModeSticky and friends) to tar's mode bits.
func tarMode(m os.FileMode) int64 {
	mode := int64(m.Perm())
	if m&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	if m&os.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&os.ModeSetuid != 0 {
		mode |= 0o4000
	}
	return mode
}

// accounts returns /etc/passwd and /etc/group naming root and the image's user, so that tools
// resolving the uid (id, ls, log lines) and the runtime's group lookup find a name and group.
func (s *Spec) accounts() map[string][]byte {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n"
	group := "root:x:0:\n"
	if s.UID != 0 {
		u := s.userName()
		home := "/home/" + u
		if u == "nobody" {
			home = "/nonexistent"
		}
		passwd += fmt.Sprintf("%s:x:%d:%d:%s:%s:/sbin/nologin\n", u, s.UID, s.UID, u, home)
		group += fmt.Sprintf("%s:x:%d:\n", u, s.UID)
	}
	return map[string][]byte{"/etc/passwd": []byte(passwd), "/etc/group": []byte(group)}
}
