package push

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// productImages are the images `make push` pushes (the Makefile's PRODUCT_IMAGES).
var productImages = []string{"controller", "pod-reconciler", "node-agent", "janitor", "mounter", "nats", "csi-provisioner"}

// fakeChart writes a packaged chart that holds only s3csi/Chart.yaml.
func fakeChart(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	body := "apiVersion: v2\nname: s3csi\nversion: 1.2.3\nappVersion: \"1.2.3\"\n"
	if err := tw.WriteHeader(&tar.Header{Name: "s3csi/Chart.yaml", Mode: 0o644, Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(tw, body); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "s3csi-1.2.3.tgz")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeHelm writes a helm that records its arguments, one a line, into the returned file, prints
// output and exits with code.
func fakeHelm(t *testing.T, output string, code int) (helm, args string) {
	t.Helper()
	dir := t.TempDir()
	helm, args = filepath.Join(dir, "helm"), filepath.Join(dir, "args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > '" + args + "'\nprintf '%s\\n' '" + output + "'\nexit " + string(rune('0'+code)) + "\n"
	if err := os.WriteFile(helm, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return helm, args
}

func TestTheChartIsPushedInPlainHTTPOnlyToALoopbackRegistry(t *testing.T) {
	chart := fakeChart(t)
	for _, tc := range []struct {
		registry, want string
	}{
		{"127.0.0.1:5000/s3csi", "push " + chart + " oci://127.0.0.1:5000/s3csi/charts --plain-http"},
		{"localhost:5000/s3csi/", "push " + chart + " oci://localhost:5000/s3csi/charts --plain-http"},
		{"[::1]:5000/s3csi", "push " + chart + " oci://[::1]:5000/s3csi/charts --plain-http"},
		{"192.168.1.10:5000/s3csi", "push " + chart + " oci://192.168.1.10:5000/s3csi/charts"},
		{"ghcr.io/s3csi", "push " + chart + " oci://ghcr.io/s3csi/charts"},
	} {
		t.Run(tc.registry, func(t *testing.T) {
			helm, argsFile := fakeHelm(t, "Pushed: x", 0)
			r, err := Chart(context.Background(), ChartOptions{Registry: tc.registry, Helm: helm}, chart)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(argsFile)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(strings.Fields(string(b)), " "); got != tc.want {
				t.Errorf("helm %s, want helm %s", got, tc.want)
			}
			if r.Name != "s3csi" || r.Version != "1.2.3" || r.Output != "Pushed: x" {
				t.Errorf("result %+v", r)
			}
		})
	}
}

func TestAChartPushRefusedByHelmNamesTheRegistryAndHelmsAnswer(t *testing.T) {
	helm, _ := fakeHelm(t, "Error: unexpected status code 403: denied", 1)
	_, err := Chart(context.Background(), ChartOptions{Registry: "registry.example.com/s3csi", Helm: helm}, fakeChart(t))
	if err == nil {
		t.Fatal("pushed, want an error")
	}
	for _, want := range []string{"to registry registry.example.com", "oci://registry.example.com/s3csi/charts/s3csi", "Error: unexpected status code 403: denied"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestABadRegistryIsRefusedBeforeHelmRuns(t *testing.T) {
	helm, argsFile := fakeHelm(t, "", 0)
	for _, reg := range []string{"", "https://ghcr.io/s3csi", "s3csi"} {
		if _, err := Chart(context.Background(), ChartOptions{Registry: reg, Helm: helm}, fakeChart(t)); err == nil {
			t.Errorf("registry %q: pushed, want refused", reg)
		}
	}
	if _, err := os.Stat(argsFile); !os.IsNotExist(err) {
		t.Errorf("helm ran: %v", err)
	}
}

func TestTheInstallCommandSetsWhatTheChartNeedsToFindTheImages(t *testing.T) {
	r := ChartResult{Name: "s3csi", Version: "1.2.3"}
	for _, tc := range []struct {
		registry string
		plain    bool
		want     string
	}{
		{"127.0.0.1:5000/s3csi", true, "--plain-http --set image.registry=127.0.0.1:5000"},
		{"ghcr.io/s3csi/", false, "--set image.registry=ghcr.io"},
		{"harbor.example.com/team/s3csi", false, "--set image.registry=harbor.example.com/team"},
		{"ghcr.io/myorg", false, "--set image.registry=ghcr.io/myorg --set image.repositories.controller=controller " +
			"--set image.repositories.podReconciler=pod-reconciler --set image.repositories.csiProvisioner=csi-provisioner"},
	} {
		t.Run(tc.registry, func(t *testing.T) {
			r.Ref, r.PlainHTTP = "oci://"+strings.TrimSuffix(tc.registry, "/")+"/charts/s3csi", tc.plain
			got := InstallCommand(tc.registry, r, []string{"controller", "pod-reconciler", "csi-provisioner"})
			want := "helm install s3csi " + r.Ref + " --version 1.2.3 " + tc.want
			if got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../../.."

// realHelm is the pinned helm (make tools), with its homes and the Docker config in temporary
// directories so that nothing of the user's is read or written.
func realHelm(t *testing.T) string {
	t.Helper()
	helm, err := filepath.Abs(filepath.Join(repoRoot, "bin", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("the pinned helm is missing: run `make tools` (%v)", err)
	}
	home := t.TempDir()
	for _, k := range []string{"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME", "DOCKER_CONFIG"} {
		t.Setenv(k, filepath.Join(home, k))
	}
	return helm
}

func TestAChartPushToAnUnreachableRegistryNamesItAndHelmsAnswer(t *testing.T) {
	_, err := Chart(context.Background(), ChartOptions{Registry: "127.0.0.1:1/s3csi", Helm: realHelm(t)}, fakeChart(t))
	if err == nil {
		t.Fatal("pushed, want an error")
	}
	for _, want := range []string{"to registry 127.0.0.1:1", "dial tcp 127.0.0.1:1", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// imageRef is an image the rendered chart runs: a container's image or the Mountpoint Pods'.
var imageRef = regexp.MustCompile(`(?m)(?:image: |--mountpoint-image=)"?([^"\s]+)`)

// `make push REGISTRY=R` then the printed `helm install`: every image the chart runs is one
// pushed, and every image pushed is run, whether R ends in /s3csi (the chart's repositories) or
// not.
func TestTheInstallCommandRunsTheImagesPushedWithTheChart(t *testing.T) {
	helm := realHelm(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	dist := t.TempDir()
	if out, err := exec.Command(helm, "package", filepath.Join(repoRoot, "charts", "s3csi"), "--version", "1.2.3",
		"--app-version", "1.2.3", "--destination", dist).CombinedOutput(); err != nil {
		t.Fatalf("helm package: %v\n%s", err, out)
	}
	chart := filepath.Join(dist, "s3csi-1.2.3.tgz")
	for _, prefix := range []string{host + "/s3csi", host + "/team"} {
		t.Run(prefix, func(t *testing.T) {
			o := Options{Registry: prefix, Keychain: anonymous}
			for _, img := range productImages {
				if _, err := Index(t.Context(), o, img, randomIndex(t), "1.2.3", nil); err != nil {
					t.Fatal(err)
				}
			}
			r, err := Chart(t.Context(), ChartOptions{Registry: prefix, Helm: helm}, chart)
			if err != nil {
				t.Fatal(err)
			}
			args := strings.Fields(InstallCommand(prefix, r, productImages))
			if args[0] != "helm" || args[1] != "install" {
				t.Fatalf("install command %v", args)
			}
			args[1] = "template"
			out, err := exec.Command(helm, append(args[1:], "--kube-version", "1.34.0", "--set", "s3.endpointUrl=https://s3.example.com")...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args[1:], " "), err, out)
			}
			var run []string
			for _, m := range imageRef.FindAllStringSubmatch(string(out), -1) {
				ref, err := name.ParseReference(m[1], name.Insecure)
				if err != nil {
					t.Fatalf("image %q: %v", m[1], err)
				}
				if _, err := remote.Head(ref, remote.WithContext(t.Context())); err != nil {
					t.Errorf("the chart runs %s, which is not in the registry: %v", m[1], err)
				}
				if !slices.Contains(run, ref.Context().RepositoryStr()) {
					run = append(run, ref.Context().RepositoryStr())
				}
			}
			path := strings.TrimPrefix(prefix, host+"/")
			for _, img := range productImages {
				if !slices.Contains(run, path+"/"+img) {
					t.Errorf("the chart does not run the pushed %s/%s (it runs %v)", path, img, run)
				}
			}
		})
	}
}
