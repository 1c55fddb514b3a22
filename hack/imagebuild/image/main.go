package image

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/s3csi/s3csi/hack/imagebuild/push"
)

// UsageError is a wrong command line.
type UsageError struct{ error }

// subcommands are those Main runs.
const subcommands = "build, check, list, index, push, plugin, retime or checksums"

// Main runs one imagebuild subcommand (build, check, list, index, push, and for the other
// release files plugin, retime and checksums) and writes its report to w; ctx bounds a push.
func Main(ctx context.Context, args []string, w io.Writer) error {
	if len(args) == 0 {
		return UsageError{fmt.Errorf("want a subcommand: %s", subcommands)}
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
	case "index":
		return indexCommand(fs, args[1:], w)
	case "push":
		return pushCommand(ctx, fs, args[1:], w)
	case "plugin":
		return pluginCommand(fs, args[1:], w)
	case "retime":
		return retimeCommand(fs, args[1:], w)
	case "checksums":
		return checksumsCommand(fs, args[1:], w)
	}
	return UsageError{fmt.Errorf("unknown subcommand %q: want %s", args[0], subcommands)}
}

// indexCommand runs `imagebuild index`: BuildIndex over the spec flags, for each -platform.
func indexCommand(fs *flag.FlagSet, args []string, w io.Writer) error {
	out := fs.String("out", "", "the OCI layout directory to write, e.g. bin/release/images/controller")
	sbomDir := fs.String("sbom-dir", "", "the directory of the SPDX documents, written as <base of -out>-<arch>.spdx.json")
	var platforms listFlag
	fs.Var(&platforms, "platform", "linux/ARCH: a platform of the index (repeatable, in order); "+
		ArchPlaceholder+" in a -file source stands for ARCH")
	spec := AddSpecFlags(fs)
	if err := fs.Parse(args); err != nil {
		return UsageError{err}
	}
	if *out == "" || *sbomDir == "" || len(platforms) == 0 || fs.NArg() != 0 {
		return UsageError{fmt.Errorf("want -out, -sbom-dir, at least one -platform and no arguments")}
	}
	var archs []string
	for _, p := range platforms {
		goos, arch, ok := strings.Cut(p, "/")
		if !ok || goos != "linux" || !archPattern.MatchString(arch) {
			return UsageError{fmt.Errorf("parse -platform %q: want linux/ARCH, e.g. linux/arm64", p)}
		}
		archs = append(archs, arch)
	}
	s, err := spec()
	if err != nil {
		return UsageError{err}
	}
	r, err := BuildIndex(s, archs, *out, *sbomDir)
	if err != nil {
		return err
	}
	state := "built"
	if r.Unchanged {
		state = "same "
	}
	line := fmt.Sprintf("%s %-28s %s", state, filepath.Base(*out)+":"+r.Tag, r.Digest.Hex[:12])
	for _, p := range r.Platforms {
		line += fmt.Sprintf("  linux/%s %5.1f MB", p.Arch, float64(p.LayerSize)/1e6)
	}
	_, err = fmt.Fprintln(w, line)
	return err
}

// pushCommand runs `imagebuild push`: each layout's tagged index and its referrers to
// -registry/<base of the layout directory>:<tag>, then the -chart with helm to
// oci://-registry/charts, and prints the `helm install` that installs both.
func pushCommand(ctx context.Context, fs *flag.FlagSet, args []string, w io.Writer) error {
	registry := fs.String("registry", "", "host[:port]/prefix to push to, e.g. ghcr.io/s3csi or 127.0.0.1:5000/s3csi")
	chart := fs.String("chart", "", "a packaged chart (helm package) to push to oci://<registry>/charts after the images")
	helm := fs.String("helm", "helm", "the helm program that pushes -chart")
	if err := fs.Parse(args); err != nil {
		return UsageError{err}
	}
	if *registry == "" || (fs.NArg() == 0 && *chart == "") {
		return UsageError{fmt.Errorf("want -registry host[:port]/prefix and at least one OCI layout directory or -chart")}
	}
	o := push.Options{Registry: *registry}
	var images []string
	for _, dir := range fs.Args() {
		if _, err := o.Repository(filepath.Base(dir)); err != nil {
			return UsageError{err}
		}
		images = append(images, filepath.Base(dir))
	}
	if *chart != "" {
		if _, err := o.Repository("charts"); err != nil {
			return UsageError{err}
		}
	}
	for _, dir := range fs.Args() {
		l, err := ReadLayout(dir)
		if err != nil {
			return err
		}
		r, err := push.Index(ctx, o, filepath.Base(dir), l.Index, l.Tag, l.Referrers)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "pushed %s@%s (%d images, %d referrers)\n", r.Ref, r.Digest, r.Manifests, r.Referrers); err != nil {
			return err
		}
	}
	if *chart == "" {
		return nil
	}
	r, err := push.Chart(ctx, push.ChartOptions{Registry: *registry, Helm: *helm}, *chart)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "pushed chart %s:%s (%s)\ninstall with: %s\n", r.Ref, r.Version,
		strings.ReplaceAll(r.Output, "\n", "; "), push.InstallCommand(*registry, r, images))
	return err
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
