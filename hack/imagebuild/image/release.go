package image

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/s3csi/s3csi/hack/imagebuild/release"
)

// pluginCommand runs `imagebuild plugin`: the kubectl plugin's archives and Krew manifest.
func pluginCommand(fs *flag.FlagSet, args []string, w io.Writer) error {
	o := release.PluginOptions{}
	fs.StringVar(&o.Out, "out", "", "the directory of the archives and the manifest, e.g. bin/release/plugin")
	fs.StringVar(&o.Version, "version", "", "the release's version without v, e.g. 0.1.0")
	fs.StringVar(&o.URL, "url", "", "where the archives are downloaded from: each uri is URL/<archive>")
	fs.StringVar(&o.Homepage, "homepage", "", "the plugin's homepage")
	fs.StringVar(&o.License, "license", "", "the license file, LICENSE in each archive")
	created := fs.String("created", "", "time of every archive entry (RFC 3339), e.g. the commit time")
	var bins listFlag
	fs.Var(&bins, "bin", "OS/ARCH=PATH: kubectl-s3csi built for OS/ARCH (repeatable, in the manifest's order)")
	if err := fs.Parse(args); err != nil {
		return UsageError{err}
	}
	if o.Out == "" || *created == "" || len(bins) == 0 || fs.NArg() != 0 {
		return UsageError{fmt.Errorf("want -out, -version, -url, -homepage, -license, -created, at least one -bin and no arguments")}
	}
	var err error
	if o.Created, err = time.Parse(time.RFC3339, *created); err != nil {
		return UsageError{fmt.Errorf("parse -created: %w", err)}
	}
	for _, b := range bins {
		platform, bin, ok := strings.Cut(b, "=")
		goos, arch, ok2 := strings.Cut(platform, "/")
		if !ok || !ok2 || goos == "" || arch == "" || bin == "" {
			return UsageError{fmt.Errorf("parse -bin %q: want OS/ARCH=PATH, e.g. darwin/arm64=bin/darwin_arm64/kubectl-s3csi", b)}
		}
		o.Platforms = append(o.Platforms, release.Platform{OS: goos, Arch: arch, Binary: bin})
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	files, err := release.WritePlugin(o)
	if err != nil {
		return err
	}
	for _, f := range files {
		if _, err := fmt.Fprintf(w, "wrote %-48s %8s  sha256 %s\n", filepath.Base(f.Path), release.HumanSize(f.Size), f.SHA256[:12]); err != nil {
			return err
		}
	}
	return nil
}

// retimeCommand runs `imagebuild retime`: a gzip tarball (helm package's chart) made reproducible.
func retimeCommand(fs *flag.FlagSet, args []string, w io.Writer) error {
	at := fs.String("time", "", "the time (RFC 3339) every entry gets, e.g. the commit time")
	if err := fs.Parse(args); err != nil {
		return UsageError{err}
	}
	if *at == "" || fs.NArg() == 0 {
		return UsageError{fmt.Errorf("want -time and at least one .tgz")}
	}
	t, err := time.Parse(time.RFC3339, *at)
	if err != nil {
		return UsageError{fmt.Errorf("parse -time: %w", err)}
	}
	for _, p := range fs.Args() {
		r, err := release.Retime(p, t)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "wrote %-48s %8s  sha256 %s\n", filepath.Base(p), release.HumanSize(r.Size), r.SHA256[:12]); err != nil {
			return err
		}
	}
	return nil
}

// checksumsCommand runs `imagebuild checksums`: SHA256SUMS and images.txt of a release
// directory, and its listing.
func checksumsCommand(fs *flag.FlagSet, args []string, w io.Writer) error {
	dir := fs.String("dir", "", "the release directory, e.g. bin/release")
	if err := fs.Parse(args); err != nil {
		return UsageError{err}
	}
	if *dir == "" || fs.NArg() != 0 {
		return UsageError{fmt.Errorf("want -dir and no arguments")}
	}
	l, err := release.Checksum(*dir)
	if err != nil {
		return err
	}
	return l.Print(w)
}
