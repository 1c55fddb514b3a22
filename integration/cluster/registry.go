package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// The cluster pulls the product's images and chart from a registry on this machine, as a user's
// cluster pulls them from theirs: `make push` fills it, containerd pulls from it by name
// (deploy/cluster/hosts.toml), and helm installs the chart from it (oci://). Nothing of the
// product is imported into containerd.

// RegistryHost is the cluster's registry, host:port on the loopback (plain HTTP, as containerd
// and helm allow for a loopback registry only).
func (c Config) RegistryHost() string { return fmt.Sprintf("127.0.0.1:%d", c.RegistryPort) }

// RegistryPrefix is where `make push REGISTRY=...` puts the images: <prefix>/<image>:<tag>.
// The chart's image.registry is RegistryHost: its repositories are s3csi/<image>.
func (c Config) RegistryPrefix() string { return c.RegistryHost() + "/s3csi" }

// ChartRef is the chart in the registry (helm push of `make push`).
func (c Config) ChartRef() string { return "oci://" + c.RegistryPrefix() + "/charts/s3csi" }

// registryAuthEnv carries the private part's user:password to the registry daemon.
const registryAuthEnv = "S3CSI_REGISTRY_AUTH"

// RegistryAuthFromEnv is the private part's user:password the daemon was started with.
func RegistryAuthFromEnv() string { return os.Getenv(registryAuthEnv) }

func (c Config) registryDir() string { return filepath.Join(c.StateDir, "registry") }

// releaseTagFile records the tag Push gave the images last, which InstallChart installs.
func (c Config) releaseTagFile() string { return filepath.Join(c.StateDir, "release-tag") }

// PrivatePrefix is the part of the registry that needs credentials, as a private registry does:
// repositories <RegistryHost>/private/..., user RegistryUser, password PrivateRegistryPassword.
const (
	PrivatePrefix = "private"
	RegistryUser  = "s3csi"
)

// PrivateRegistryPassword is the password of RegistryUser (a test-only registry).
func (c Config) PrivateRegistryPassword() string { return c.S3SecretKey[:16] }

// ServeRegistry serves an OCI distribution registry (go-containerregistry's) on addr until ctx
// ends: blobs in dir, manifests in memory, so a restarted registry is empty until the next push.
// Repositories under PrivatePrefix/ need basic auth as user:password (privateAuth).
func ServeRegistry(ctx context.Context, addr, dir, privateAuth string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create registry dir: %w", err)
	}
	user, password, ok := strings.Cut(privateAuth, ":")
	if !ok || user == "" || password == "" {
		return errors.New("registry: want the private part's credentials as user:password")
	}
	reg := registry.New(
		registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)),
		registry.WithReferrersSupport(true),
		registry.Logger(log.New(io.Discard, "", 0)),
	)
	srv := &http.Server{
		Addr: addr,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/v2/"+PrivatePrefix+"/") {
				u, p, ok := r.BasicAuth()
				if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
					w.Header().Set("WWW-Authenticate", `Basic realm="s3csi-cluster"`)
					http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
					return
				}
			}
			reg.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}

func (c Config) startRegistry() error {
	self := filepath.Join(c.RepoRoot, "bin", "s3csi-cluster")
	if _, err := os.Stat(self); err != nil {
		return fmt.Errorf("s3csi-cluster is not built: run `make bin/s3csi-cluster` (%w)", err)
	}
	// The password travels in the environment: the command line is logged, and shows in ps.
	return c.start(daemon{name: "registry", path: self, args: []string{"registry", c.RegistryHost(), c.registryDir()},
		env: []string{registryAuthEnv + "=" + RegistryUser + ":" + c.PrivateRegistryPassword()}})
}

// ReleaseImageDir is where `make images-release` writes each product image's OCI layout.
func (c Config) ReleaseImageDir() string {
	return filepath.Join(c.RepoRoot, "bin", "release", "images")
}

// Push pushes the release images (`make images-release`) and the packaged chart (`make chart`)
// into the cluster's registry with the command `make push REGISTRY=<RegistryPrefix>` runs, then
// tags every image with a tag naming their content, <chart version>-<12 hex>, which InstallChart
// installs. A rebuilt image thus changes the tag, and the next install rolls the pods onto it: an
// image rebuilt under the same tag would not be pulled again by a node that holds the old one.
func (c Config) Push(ctx context.Context, logf func(string, ...any)) error {
	t := time.Now()
	layouts, err := c.releaseLayouts()
	if err != nil {
		return err
	}
	version, err := c.chartVersion()
	if err != nil {
		return err
	}
	chart := filepath.Join(c.RepoRoot, "bin", "release", "charts", "s3csi-"+version+".tgz")
	if _, err := os.Stat(chart); err != nil {
		return fmt.Errorf("the chart is not packaged: run `make chart` (%w)", err)
	}
	imagebuild := filepath.Join(c.RepoRoot, "bin", "imagebuild")
	args := append([]string{"push", "-registry", c.RegistryPrefix(), "-chart", chart, "-helm", c.Helm()}, layouts...)
	if err := run(imagebuild, args...); err != nil {
		return fmt.Errorf("push the images and the chart to %s: %w", c.RegistryPrefix(), err)
	}
	h := sha256.New()
	descs := map[string]*remote.Descriptor{}
	for _, dir := range layouts {
		ref, err := name.NewTag(c.RegistryPrefix()+"/"+filepath.Base(dir)+":"+version, name.Insecure)
		if err != nil {
			return err
		}
		d, err := remote.Get(ref, remote.WithContext(ctx))
		if err != nil {
			return fmt.Errorf("read back %s: %w", ref, err)
		}
		fmt.Fprintf(h, "%s %s\n", filepath.Base(dir), d.Digest)
		descs[filepath.Base(dir)] = d
	}
	tag := version + "-" + hex.EncodeToString(h.Sum(nil))[:12]
	for image, d := range descs {
		if err := c.TagImage(ctx, image, d, tag); err != nil {
			return err
		}
	}
	if err := os.WriteFile(c.releaseTagFile(), []byte(tag), 0o644); err != nil {
		return fmt.Errorf("record the release tag: %w", err)
	}
	logf("pushed %d images (tag %s) and the chart %s to %s in %v", len(descs), tag, version, c.RegistryHost(), time.Since(t).Round(100*time.Millisecond))
	return nil
}

// releaseLayouts are the OCI layout directories of `make images-release`, one per image, sorted.
func (c Config) releaseLayouts() ([]string, error) {
	entries, err := os.ReadDir(c.ReleaseImageDir())
	if err != nil {
		return nil, fmt.Errorf("no release images: run `make images-release` (%w)", err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(c.ReleaseImageDir(), e.Name()))
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no release images in %s: run `make images-release`", c.ReleaseImageDir())
	}
	return dirs, nil
}

// TagImage gives the image d of the registry the tag to as well.
func (c Config) TagImage(ctx context.Context, image string, d *remote.Descriptor, to string) error {
	ref, err := name.NewTag(c.RegistryPrefix()+"/"+image+":"+to, name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Tag(ref, d, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("tag %s: %w", ref, err)
	}
	return nil
}

// ReleaseTag is the tag Push gave the images last.
func (c Config) ReleaseTag() (string, error) {
	b, err := os.ReadFile(c.releaseTagFile())
	if err != nil {
		return "", fmt.Errorf("no images were pushed to the cluster's registry: run `make cluster-up` (%w)", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// TagImages gives every product image tagged from in the cluster's registry the tag to as well,
// as a registry holds a new release: the chart can then be upgraded to tag to.
func (c Config) TagImages(ctx context.Context, from, to string) error {
	layouts, err := c.releaseLayouts()
	if err != nil {
		return err
	}
	for _, dir := range layouts {
		ref, err := name.NewTag(c.RegistryPrefix()+"/"+filepath.Base(dir)+":"+from, name.Insecure)
		if err != nil {
			return err
		}
		d, err := remote.Get(ref, remote.WithContext(ctx))
		if err != nil {
			return fmt.Errorf("read %s: %w", ref, err)
		}
		if err := c.TagImage(ctx, filepath.Base(dir), d, to); err != nil {
			return err
		}
	}
	return nil
}

// chartVersion is the release's version, the Makefile's VERSION: the chart's appVersion, which
// `make chart` makes the packaged chart's version too.
func (c Config) chartVersion() (string, error) {
	b, err := os.ReadFile(filepath.Join(c.RepoRoot, "charts", "s3csi", "Chart.yaml"))
	if err != nil {
		return "", fmt.Errorf("read the chart's version: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`), nil
		}
	}
	return "", errors.New("charts/s3csi/Chart.yaml has no appVersion")
}
