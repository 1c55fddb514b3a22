package release

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/s3csi/s3csi/hack/imagebuild/sbom"
)

// The kubectl plugin as Krew knows it: `kubectl krew install s3csi` runs `kubectl s3csi`.
const (
	// PluginName is the plugin's name in Krew and its manifest's file name (s3csi.yaml).
	PluginName = "s3csi"
	// PluginBinary is the program in each archive: kubectl finds kubectl-s3csi on the PATH.
	PluginBinary = "kubectl-s3csi"
	// KrewAPIVersion and KrewKind are those of a Krew plugin manifest.
	KrewAPIVersion = "krew.googlecontainertools.github.com/v1alpha2"
	KrewKind       = "Plugin"

	shortDescription = "Trace and inspect s3csi volume mounts"
	description      = `Reads the s3csi CSI driver's audit trail and state: "events" shows each mount's path
through the driver's event bus and where it stopped, "status" each node's Mountpoint Pods,
attachments, workloads and mount health, "replay" republishes events for tests and
rehearsals, and "migrate keep-namespaces" is the one step a switch from the Scality CSI
Driver for S3 v2 needs beyond Helm.
`
)

// Platform is one os/arch the plugin is released for.
type Platform struct {
	// OS and Arch are Go's GOOS and GOARCH, which Krew matches too (darwin, linux; amd64, arm64).
	OS, Arch string
	// Binary is kubectl-s3csi built for it, statically (CGO_ENABLED=0).
	Binary string
}

// PluginOptions say which archives and manifest WritePlugin writes.
type PluginOptions struct {
	// Out is the directory of the archives and the manifest (e.g. bin/release/plugin).
	Out string
	// Version is the release's version without a v (e.g. 0.1.0); the manifest says v<Version>.
	Version string
	// URL is where the archives are downloaded from: each platform's uri is URL/<archive name>.
	URL string
	// Homepage is the manifest's homepage.
	Homepage string
	// License is the file shipped as LICENSE in every archive.
	License string
	// Created is every archive entry's time (the commit time).
	Created time.Time
	// Platforms are the platforms, in the manifest's order.
	Platforms []Platform
}

// Krew plugin manifest (Krew's pkg/index types, with the fields written here).
type (
	// KrewPlugin is a plugin manifest.
	KrewPlugin struct {
		APIVersion string       `json:"apiVersion"`
		Kind       string       `json:"kind"`
		Metadata   KrewMetadata `json:"metadata"`
		Spec       KrewSpec     `json:"spec"`
	}
	// KrewMetadata names the plugin.
	KrewMetadata struct {
		Name string `json:"name"`
	}
	// KrewSpec describes the plugin and where each platform's archive is.
	KrewSpec struct {
		Version          string         `json:"version"`
		Homepage         string         `json:"homepage"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Platforms        []KrewPlatform `json:"platforms"`
	}
	// KrewPlatform is one platform's archive and what Krew installs from it.
	KrewPlatform struct {
		Selector KrewSelector `json:"selector"`
		URI      string       `json:"uri"`
		SHA256   string       `json:"sha256"`
		Files    []KrewFile   `json:"files"`
		Bin      string       `json:"bin"`
	}
	// KrewSelector matches the platform by the labels os and arch.
	KrewSelector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	}
	// KrewFile copies From (a glob in the archive) to To in the plugin's directory.
	KrewFile struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
)

// semverPattern is a semantic version without the v (semver.org's grammar, loosely).
var semverPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// PluginArchiveName is the archive of version for goos/arch.
func PluginArchiveName(version, goos, arch string) string {
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", PluginBinary, version, goos, arch)
}

// WritePlugin writes Out/<PluginArchiveName> for each platform, holding kubectl-s3csi and
// LICENSE (reproducible: WriteTarGz), then the Krew manifest Out/s3csi.yaml naming each archive's
// URL and SHA-256. A binary built for another platform, or with cgo, is refused. It returns the
// archives, then the manifest.
func WritePlugin(o PluginOptions) ([]Written, error) {
	if !semverPattern.MatchString(o.Version) {
		return nil, fmt.Errorf("plugin version %q: want a semantic version without v, e.g. 0.1.0", o.Version)
	}
	if o.URL == "" || o.Homepage == "" || o.License == "" || len(o.Platforms) == 0 {
		return nil, errors.New("plugin: want a URL, a homepage, a license and at least one platform")
	}
	m := KrewPlugin{
		APIVersion: KrewAPIVersion, Kind: KrewKind, Metadata: KrewMetadata{Name: PluginName},
		Spec: KrewSpec{
			Version: "v" + o.Version, Homepage: o.Homepage,
			ShortDescription: shortDescription, Description: description,
		},
	}
	var out []Written
	seen := map[string]bool{}
	for _, p := range o.Platforms {
		if seen[p.OS+"/"+p.Arch] {
			return nil, fmt.Errorf("plugin: platform %s/%s given twice", p.OS, p.Arch)
		}
		seen[p.OS+"/"+p.Arch] = true
		if err := checkPluginBinary(p); err != nil {
			return nil, err
		}
		name := PluginArchiveName(o.Version, p.OS, p.Arch)
		w, err := WriteTarGz(filepath.Join(o.Out, name), []File{
			{Name: PluginBinary, Source: p.Binary, Mode: 0o755},
			{Name: "LICENSE", Source: o.License, Mode: 0o644},
		}, o.Created)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
		m.Spec.Platforms = append(m.Spec.Platforms, KrewPlatform{
			Selector: KrewSelector{MatchLabels: map[string]string{"os": p.OS, "arch": p.Arch}},
			URI:      strings.TrimSuffix(o.URL, "/") + "/" + name,
			SHA256:   w.SHA256,
			Files:    []KrewFile{{From: "*", To: "."}},
			Bin:      PluginBinary,
		})
	}
	doc, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("plugin manifest: %w", err)
	}
	manifest := filepath.Join(o.Out, PluginName+".yaml")
	w, err := writeAtomic(manifest, func(w io.Writer) error { _, err := w.Write(doc); return err })
	if err != nil {
		return nil, err
	}
	return append(out, w), nil
}

// checkPluginBinary refuses a binary not built for p with CGO_ENABLED=0: a mixed-up build must
// fail the release, not a user's kubectl.
func checkPluginBinary(p Platform) error {
	bi, err := buildinfo.ReadFile(p.Binary)
	if err != nil {
		return fmt.Errorf("plugin binary for %s/%s: %w", p.OS, p.Arch, err)
	}
	var errs []error
	for _, want := range [][2]string{{"GOOS", p.OS}, {"GOARCH", p.Arch}, {"CGO_ENABLED", "0"}} {
		if got, _ := sbom.Setting(bi, want[0]); got != want[1] {
			errs = append(errs, fmt.Errorf("was built with %s=%q, want %q", want[0], got, want[1]))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("plugin binary %s for %s/%s: %w", p.Binary, p.OS, p.Arch, err)
	}
	return nil
}
