package sbom

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	sumBytes = bytes.Repeat([]byte{0xab}, 32)
	sum      = "h1:" + base64.StdEncoding.EncodeToString(sumBytes)
	binSHA   = strings.Repeat("0f", 32)
)

func testBuildInfo() *debug.BuildInfo {
	return &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Path:      "example.com/app/cmd/app",
		Main:      debug.Module{Path: "example.com/app", Version: "(devel)"},
		Deps: []*debug.Module{
			{Path: "github.com/a/b", Version: "v1.2.3", Sum: sum},
			{Path: "github.com/docker/cli", Version: "v29.7.2+incompatible", Sum: sum},
			{Path: "k8s.io/api", Version: "v0.0.0", Replace: &debug.Module{Path: "k8s.io/api", Version: "v0.36.1", Sum: sum}},
			{Path: "example.com/shared", Version: "v0.0.0", Replace: &debug.Module{Path: "../shared", Version: "(devel)"}},
			{Path: "github.com/a-b", Version: "v1.2.3"}, // the same SPDX identifier as github.com/a/b
		},
		Settings: []debug.BuildSetting{
			{Key: "CGO_ENABLED", Value: "0"}, {Key: "GOARCH", Value: "arm64"}, {Key: "GOOS", Value: "linux"},
			{Key: "vcs.revision", Value: "0123abcd"},
		},
	}
}

func testOptions() Options {
	return Options{
		Name:      "s3csi/app:1.0.0 linux/arm64",
		Namespace: "https://github.com/s3csi/s3csi/spdx/s3csi/app/1.0.0/linux-arm64/",
		FileName:  "/app",
		Created:   time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)),
	}
}

func TestTheDocumentDescribesTheBuild(t *testing.T) {
	doc := New(testBuildInfo(), binSHA, testOptions())
	pkg := func(t *testing.T, name string) Package {
		t.Helper()
		i := slices.IndexFunc(doc.Packages, func(p Package) bool { return p.Name == name })
		if i < 0 {
			t.Fatalf("no package %s in %+v", name, doc.Packages)
		}
		return doc.Packages[i]
	}
	purl := func(p Package) string {
		if len(p.ExternalRefs) != 1 || p.ExternalRefs[0].ReferenceType != "purl" {
			return ""
		}
		return p.ExternalRefs[0].ReferenceLocator
	}
	for _, tc := range []struct {
		name  string
		check func(t *testing.T) bool
	}{
		{"it is SPDX 2.3 under CC0 with the caller's name", func(*testing.T) bool {
			return doc.SPDXVersion == "SPDX-2.3" && doc.DataLicense == "CC0-1.0" && doc.SPDXID == "SPDXRef-DOCUMENT" &&
				doc.Name == "s3csi/app:1.0.0 linux/arm64"
		}},
		{"its namespace ends with the binary's hash", func(*testing.T) bool {
			return doc.DocumentNamespace == "https://github.com/s3csi/s3csi/spdx/s3csi/app/1.0.0/linux-arm64/"+binSHA
		}},
		{"its creation time is the caller's, in UTC", func(*testing.T) bool {
			return doc.CreationInfo.Created == "2025-01-02T02:04:05Z" && slices.Equal(doc.CreationInfo.Creators, []string{Tool})
		}},
		{"it describes the main module, the application file with its hash", func(t *testing.T) bool {
			m := pkg(t, "example.com/app")
			return m.PrimaryPackagePurpose == "APPLICATION" && m.PackageFileName == "/app" && m.VersionInfo == "(devel)" &&
				len(m.Checksums) == 1 && m.Checksums[0].ChecksumValue == binSHA && purl(m) == "pkg:golang/example.com/app" &&
				slices.Contains(doc.Relationships, Relationship{"SPDXRef-DOCUMENT", "DESCRIBES", m.SPDXID})
		}},
		{"the main package and every build setting are annotations", func(t *testing.T) bool {
			var comments []string
			for _, a := range pkg(t, "example.com/app").Annotations {
				comments = append(comments, a.Comment)
			}
			return slices.Equal(comments, []string{"main package: example.com/app/cmd/app", "build setting: CGO_ENABLED=0",
				"build setting: GOARCH=arm64", "build setting: GOOS=linux", "build setting: vcs.revision=0123abcd"})
		}},
		{"the standard library has the toolchain's version", func(t *testing.T) bool {
			p := pkg(t, "stdlib")
			return p.VersionInfo == "1.26.8" && purl(p) == "pkg:golang/stdlib@1.26.8"
		}},
		{"a dependency has its version, purl and go.sum hash", func(t *testing.T) bool {
			p := pkg(t, "github.com/a/b")
			return p.VersionInfo == "v1.2.3" && purl(p) == "pkg:golang/github.com/a/b@v1.2.3" &&
				len(p.Checksums) == 1 && p.Checksums[0] == Checksum{"SHA256", hex.EncodeToString(sumBytes)} &&
				p.Comment == "go.sum "+sum
		}},
		{"a + in a version is escaped in the purl", func(t *testing.T) bool {
			return purl(pkg(t, "github.com/docker/cli")) == "pkg:golang/github.com/docker/cli@v29.7.2%2Bincompatible"
		}},
		{"a replaced module has its replacement's version and hash", func(t *testing.T) bool {
			p := pkg(t, "k8s.io/api")
			return p.VersionInfo == "v0.36.1" && purl(p) == "pkg:golang/k8s.io/api@v0.36.1" && len(p.Checksums) == 1 &&
				strings.Contains(p.Comment, "replaced by k8s.io/api v0.36.1")
		}},
		{"a module replaced by a directory has no version in its purl", func(t *testing.T) bool {
			p := pkg(t, "example.com/shared")
			return purl(p) == "pkg:golang/example.com/shared" && p.Checksums == nil && p.Comment == "replaced by ../shared (devel)"
		}},
		{"the main module depends on every other package", func(*testing.T) bool {
			deps := 0
			for _, r := range doc.Relationships {
				if r.RelationshipType == "DEPENDS_ON" && r.SPDXElementID == doc.Packages[0].SPDXID {
					deps++
				}
			}
			return deps == len(doc.Packages)-1
		}},
		{"identifiers are valid and unique, relationships name them", func(*testing.T) bool {
			valid := regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)
			ids := map[string]bool{"SPDXRef-DOCUMENT": true}
			for _, p := range doc.Packages {
				if !valid.MatchString(p.SPDXID) || ids[p.SPDXID] {
					t.Logf("identifier %q", p.SPDXID)
					return false
				}
				ids[p.SPDXID] = true
			}
			for _, r := range doc.Relationships {
				if !ids[r.SPDXElementID] || !ids[r.RelatedSPDXElement] {
					return false
				}
			}
			return true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.check(t) {
				t.Errorf("document:\n%s", mustJSON(t, doc))
			}
		})
	}
}

func TestEqualInputsGiveTheSameDocument(t *testing.T) {
	a, b := mustJSON(t, New(testBuildInfo(), binSHA, testOptions())), mustJSON(t, New(testBuildInfo(), binSHA, testOptions()))
	if !bytes.Equal(a, b) {
		t.Errorf("two documents of the same build differ:\n%s\n%s", a, b)
	}
}

func TestReadBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bi, digest, err := ReadBinary(self)
	if err != nil {
		t.Fatalf("read the test binary: %v", err)
	}
	if bi.Main.Path != "github.com/s3csi/s3csi/hack/imagebuild" || len(digest) != 64 {
		t.Errorf("main module %q, digest %q", bi.Main.Path, digest)
	}
	if _, ok := Setting(bi, "GOARCH"); !ok {
		t.Errorf("the test binary has no GOARCH setting: %v", bi.Settings)
	}

	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadBinary(text); err == nil || !strings.Contains(err.Error(), "read Go build information of "+text) {
		t.Errorf("a shell script: error %v", err)
	}
}

func mustJSON(t *testing.T, d *Document) []byte {
	t.Helper()
	b, err := d.JSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
