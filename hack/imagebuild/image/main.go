package image

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// UsageError is a wrong command line.
type UsageError struct{ error }

// Main runs one imagebuild subcommand (build, check or list) and writes its report to w.
func Main(args []string, w io.Writer) error {
	if len(args) == 0 {
		return UsageError{fmt.Errorf("want a subcommand: build, check or list")}
	}
	fs := flag.NewFlagSet("imagebuild "+args[0], flag.ContinueOnError)
	fs.SetOutput(w)
	switch args[0] {
	case "build", "check":
		out := fs.String("out", "", "the image tarball")
		spec := AddSpecFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			return UsageError{err}
		}
		if *out == "" || fs.NArg() != 0 {
			return UsageError{fmt.Errorf("want -out and no arguments")}
		}
		s, err := spec()
		if err != nil {
			return UsageError{err}
		}
		if args[0] == "check" {
			if err := Check(s, *out); err != nil {
				return err
			}
			_, err := fmt.Fprintf(w, "ok   %s\n", s.Ref)
			return err
		}
		r, err := Build(s, *out)
		if err != nil {
			return err
		}
		state := "built"
		if r.Unchanged {
			state = "same "
		}
		_, err = fmt.Fprintf(w, "%s %-42s %7.1f MB %s\n", state, s.Ref, float64(r.Size)/1e6, r.Digest.Hex[:12])
		return err
	case "list":
		if err := fs.Parse(args[1:]); err != nil {
			return UsageError{err}
		}
		for _, p := range fs.Args() {
			if err := list(p, w); err != nil {
				return err
			}
		}
		return nil
	}
	return UsageError{fmt.Errorf("unknown subcommand %q: want build, check or list", args[0])}
}

// list prints one line per tarball: reference, compressed size, uid and entrypoint.
func list(path string, w io.Writer) error {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return openFile(path) })
	if err != nil {
		return fmt.Errorf("list %s: %w", path, err)
	}
	if len(m) != 1 || len(m[0].RepoTags) != 1 {
		return fmt.Errorf("list %s: want one image with one tag", path)
	}
	ref := m[0].RepoTags[0]
	img, err := Read(path, ref)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("list %s: %w", path, err)
	}
	size, err := fileSize(path)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%-42s %7.1f MB  user %-5s %s\n", strings.TrimPrefix(ref, "docker.io/"),
		float64(size)/1e6, cfg.Config.User, strings.Join(cfg.Config.Entrypoint, " "))
	return err
}
