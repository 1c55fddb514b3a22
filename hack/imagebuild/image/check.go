package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Read opens the image tagged ref in the tarball at path.
func Read(path, ref string) (v1.Image, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("parse reference %s: %w", ref, err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		return nil, fmt.Errorf("read image %s from %s: %w", ref, path, err)
	}
	return img, nil
}

// Check reads the tarball at path back and reports every way it differs from s: the reference, the
// platform, the config (entrypoint, user, env, working dir, labels) and the layer's members.
func Check(s *Spec, path string) error {
	img, err := Read(path, s.Ref)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("read config of %s: %w", s.Ref, err)
	}
	var errs []error
	wrong := func(what string, got, want any) {
		errs = append(errs, fmt.Errorf("%s: %s is %v, want %v", s.Ref, what, got, want))
	}
	if want := "linux/" + s.arch(); cfg.OS+"/"+cfg.Architecture != want {
		wrong("platform", cfg.OS+"/"+cfg.Architecture, want)
	}
	if !slices.Equal(cfg.Config.Entrypoint, s.Entrypoint) {
		wrong("entrypoint", cfg.Config.Entrypoint, s.Entrypoint)
	}
	if !slices.Equal(cfg.Config.Cmd, s.Cmd) {
		wrong("cmd", cfg.Config.Cmd, s.Cmd)
	}
	if want := strconv.Itoa(s.UID); cfg.Config.User != want {
		wrong("user", cfg.Config.User, want)
	}
	if !slices.Equal(cfg.Config.Env, s.env()) {
		wrong("env", cfg.Config.Env, s.env())
	}
	if cfg.Config.WorkingDir != "/" {
		wrong("working dir", cfg.Config.WorkingDir, "/")
	}
	for k, v := range s.Labels {
		if got, ok := cfg.Config.Labels[k]; !ok || got != v {
			wrong("label "+k, got, v)
		}
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("read layers of %s: %w", s.Ref, err)
	}
	if len(layers) != 1 {
		wrong("layer count", len(layers), 1)
		return errors.Join(errs...)
	}
	members, err := Members(layers[0])
	if err != nil {
		return fmt.Errorf("read layer of %s: %w", s.Ref, err)
	}
	errs = append(errs, checkMembers(s, members)...)
	return errors.Join(errs...)
}

// checkMembers compares the layer's members with the files, symlinks and dirs of s.
func checkMembers(s *Spec, members map[string]*tar.Header) []error {
	var errs []error
	get := func(p string, typ byte) *tar.Header {
		h, ok := members[p]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s is missing from the layer", s.Ref, p))
			return nil
		}
		if h.Typeflag != typ {
			errs = append(errs, fmt.Errorf("%s: %s has tar type %q, want %q", s.Ref, p, h.Typeflag, typ))
			return nil
		}
		return h
	}
	for _, f := range s.Files {
		h := get(f.Path, tar.TypeReg)
		if h == nil {
			continue
		}
		st, err := os.Stat(f.Source)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Ref, err))
			continue
		}
		if h.Size != st.Size() || h.Mode != int64(fileMode(st.Mode())) {
			errs = append(errs, fmt.Errorf("%s: %s has size %d mode %o, want size %d mode %o",
				s.Ref, f.Path, h.Size, h.Mode, st.Size(), fileMode(st.Mode())))
		}
	}
	for _, l := range s.Symlinks {
		if h := get(l.Path, tar.TypeSymlink); h != nil && h.Linkname != l.Target {
			errs = append(errs, fmt.Errorf("%s: %s points to %s, want %s", s.Ref, l.Path, h.Linkname, l.Target))
		}
	}
	for _, d := range s.Dirs {
		if h := get(d.Path, tar.TypeDir); h != nil && h.Mode != tarMode(d.Mode) {
			errs = append(errs, fmt.Errorf("%s: %s has mode %o, want %o", s.Ref, d.Path, h.Mode, tarMode(d.Mode)))
		}
	}
	for p := range s.accounts() {
		get(p, tar.TypeReg)
	}
	return errs
}

// Members lists a layer's tar headers by absolute path.
func Members(l v1.Layer) (map[string]*tar.Header, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	members := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return members, nil
		}
		if err != nil {
			return nil, err
		}
		p := "/" + h.Name
		if h.Typeflag == tar.TypeDir && len(p) > 1 && p[len(p)-1] == '/' {
			p = p[:len(p)-1]
		}
		members[p] = h
	}
}

func openFile(path string) (io.ReadCloser, error) { return os.Open(path) }

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Size(), nil
}
