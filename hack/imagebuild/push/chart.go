package push

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// ChartOptions say where and with which helm Chart pushes a packaged chart.
type ChartOptions struct {
	// Registry is the destination prefix, host[:port]/path, as for images: the chart is pushed
	// to oci://Registry/charts, so it is installed from oci://Registry/charts/<chart name>.
	Registry string
	// Helm is the helm program (bin/helm, v3.22). helm finds the registry's credentials itself:
	// its own registry config, then the Docker config.
	Helm string
}

// ChartResult is one pushed chart.
type ChartResult struct {
	// Name and Version are the chart's (its Chart.yaml).
	Name, Version string
	// Ref is the chart in the registry, oci://Registry/charts/<name>, and PlainHTTP whether helm
	// spoke plain HTTP to it (a loopback registry).
	Ref       string
	PlainHTTP bool
	// Output is what helm printed (the pushed reference and digest).
	Output string
}

// Chart pushes the packaged chart at chartPath with `helm push` to oci://Registry/charts, with
// --plain-http for a loopback registry only (the rule of Index). An error names the chart, the
// registry and what helm answered.
//
// helm v3 on its own retries in plain HTTP a registry that answers HTTPS in plain HTTP (its
// registry client's fallbackTransport); `make push` pushes the images first, over HTTPS only,
// so such a registry that is not loopback fails there before helm runs.
func Chart(ctx context.Context, o ChartOptions, chartPath string) (ChartResult, error) {
	prefix := strings.TrimSuffix(o.Registry, "/")
	repo, err := Options{Registry: prefix}.Repository("charts")
	if err != nil {
		return ChartResult{}, err
	}
	name, version, err := ChartMetadata(chartPath)
	if err != nil {
		return ChartResult{}, err
	}
	r := ChartResult{
		Name: name, Version: version, Ref: "oci://" + prefix + "/charts/" + name,
		PlainHTTP: Loopback(repo.RegistryStr()),
	}
	args := []string{"push", chartPath, "oci://" + prefix + "/charts"}
	if r.PlainHTTP {
		args = append(args, "--plain-http")
	}
	cmd := exec.CommandContext(ctx, o.Helm, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	r.Output = strings.TrimSpace(out.String())
	if err != nil {
		return ChartResult{}, fmt.Errorf("push chart %s %s to registry %s (%s): %s %s: %w: %s",
			name, version, repo.RegistryStr(), r.Ref, filepath.Base(o.Helm), strings.Join(args, " "), err, r.Output)
	}
	return r, nil
}

// ChartMetadata reads the name and version of the packaged chart at p from its Chart.yaml
// (<name>/Chart.yaml in the tarball).
func ChartMetadata(p string) (name, version string, err error) {
	f, err := os.Open(p)
	if err != nil {
		return "", "", fmt.Errorf("read chart %s: %w", p, err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", "", fmt.Errorf("read chart %s: %w", p, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", "", fmt.Errorf("read chart %s: no <name>/Chart.yaml in it", p)
		}
		if err != nil {
			return "", "", fmt.Errorf("read chart %s: %w", p, err)
		}
		if dir, file := path.Split(h.Name); file != "Chart.yaml" || strings.Count(dir, "/") != 1 {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			return "", "", fmt.Errorf("read chart %s: %w", p, err)
		}
		var meta struct{ Name, Version string }
		if err := yaml.Unmarshal(b, &meta); err != nil {
			return "", "", fmt.Errorf("read chart %s: %s: %w", p, h.Name, err)
		}
		if meta.Name == "" || meta.Version == "" {
			return "", "", fmt.Errorf("read chart %s: %s has no name or version", p, h.Name)
		}
		return meta.Name, meta.Version, nil
	}
}

// chartImagePrefix is the start of the chart's default image repositories (values.yaml,
// image.repositories: s3csi/controller, s3csi/pod-reconciler, ...).
const chartImagePrefix = "s3csi"

// InstallCommand is the `helm install` that installs the chart r pushed to registry with the
// images Index pushed there, named images (the layout names, e.g. pod-reconciler).
//
// The chart names each image <image.registry>/<image.repositories.X>:<tag>, repositories
// s3csi/<image> by default; the images are at <registry>/<image>. A registry ending in /s3csi
// therefore needs only image.registry, the registry without /s3csi; any other needs every
// repository too.
func InstallCommand(registry string, r ChartResult, images []string) string {
	prefix := strings.TrimSuffix(registry, "/")
	cmd := fmt.Sprintf("helm install %s %s --version %s", r.Name, r.Ref, r.Version)
	if r.PlainHTTP {
		cmd += " --plain-http"
	}
	if host, ok := strings.CutSuffix(prefix, "/"+chartImagePrefix); ok {
		return cmd + " --set image.registry=" + host
	}
	cmd += " --set image.registry=" + prefix
	for _, img := range images {
		cmd += fmt.Sprintf(" --set image.repositories.%s=%s", valuesKey(img), img)
	}
	return cmd
}

// valuesKey is the key of image under the chart's image.repositories: pod-reconciler is
// podReconciler.
func valuesKey(image string) string {
	parts := strings.Split(image, "-")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}
