package chart

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata from the current chart")

// TestRenderedManifestsMatchGolden renders the chart with each values file of charts/s3csi/ci
// and compares the result with testdata/<name>.golden.yaml.
func TestRenderedManifestsMatchGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir(t), "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("want at least 4 values files in charts/s3csi/ci, found %d", len(files))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), "-values.yaml")
		t.Run("the "+name+" values render as the golden file says", func(t *testing.T) {
			got, err := helmTemplate(t, "--values", file)
			if err != nil {
				t.Fatal(err)
			}
			got = maskGeneratedPasswords(got)
			golden := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o600); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden file (create it with `go test ./chart -update`): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered manifests differ from %s; if the change is intended, run `go test ./chart -update` and review the diff:\n%s",
					golden, firstDifference(string(want), string(got)))
			}
		})
	}
}

// generatedPassword matches a data line of the NATS auth Secret the chart generates: a
// user's key (a service's, audit or replay) and its random password.
var generatedPassword = regexp.MustCompile(`(?m)^(  (?:csi-controller|pod-reconciler|node-agent|janitor|audit|replay): )[A-Za-z0-9+/=]+$`)

// generatedKey matches the data line of the generated ownership key.
var generatedKey = regexp.MustCompile(`(?m)^(  key: )[A-Za-z0-9+/=]+$`)

// generatedCertificate matches a data line of the NATS TLS Secret the chart generates.
var generatedCertificate = regexp.MustCompile(`(?m)^(  (?:ca\.crt|tls\.crt|tls\.key): )[A-Za-z0-9+/=]+$`)

// maskGeneratedPasswords replaces the random passwords of the s3csi-nats-auth Secret, the
// random key of the s3csi-ownership-keys Secret and the CA, certificate and key of the
// s3csi-nats-tls Secret, which differ at every rendering, with a fixed text; no other line can
// match.
func maskGeneratedPasswords(manifests []byte) []byte {
	docs := bytes.Split(manifests, []byte("\n---\n"))
	for i, d := range docs {
		if !bytes.Contains(d, []byte("\nkind: Secret\n")) {
			continue
		}
		switch {
		case bytes.Contains(d, []byte("\n  name: s3csi-nats-auth\n")):
			docs[i] = generatedPassword.ReplaceAll(d, []byte("${1}GENERATED"))
		case bytes.Contains(d, []byte("\n  name: s3csi-ownership-keys\n")):
			docs[i] = generatedKey.ReplaceAll(d, []byte("${1}GENERATED"))
		case bytes.Contains(d, []byte("\n  name: s3csi-nats-tls\n")):
			docs[i] = generatedCertificate.ReplaceAll(d, []byte("${1}GENERATED"))
		}
	}
	return bytes.Join(docs, []byte("\n---\n"))
}

// firstDifference shows the first differing line with a little context.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n  want: " + wl + "\n  got:  " + gl
		}
	}
	return "(same lines, different bytes)"
}
