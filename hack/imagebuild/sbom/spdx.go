// Package sbom writes the software bill of materials of a Go program as an SPDX 2.3 JSON
// document, from the build information the Go linker embeds in every binary (what
// `go version -m` prints): the main module, the Go standard library at the toolchain's version,
// every dependency module with its version and go.sum hash, and the build settings.
//
// The document is a function of the binary and the Options alone, so equal inputs give
// byte-identical documents (the creation time is the caller's, e.g. the commit time).
package sbom

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
)

// MediaType is the media type of an SPDX JSON document (IANA registration of SPDX).
const MediaType = "application/spdx+json"

// Tool is the creator the documents name.
const Tool = "Tool: s3csi-imagebuild"

// Options describe the document written for one binary.
type Options struct {
	// Name is the document's name, e.g. "s3csi/controller:0.1.0 linux/arm64".
	Name string
	// Namespace is a URI unique to the project and the document's subject, e.g.
	// https://github.com/s3csi/s3csi/spdx/controller/0.1.0/linux-arm64; the binary's SHA-256 is
	// appended, so two different binaries never share a namespace.
	Namespace string
	// FileName is the binary's path inside the image, e.g. /s3csi-controller.
	FileName string
	// Created is the document's creation time.
	Created time.Time
}

// Document is an SPDX 2.3 document, with the fields this package writes.
type Document struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      CreationInfo   `json:"creationInfo"`
	Packages          []Package      `json:"packages"`
	Relationships     []Relationship `json:"relationships"`
}

// CreationInfo says who made the document and when.
type CreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// Package is one SPDX package: the main module, the standard library or a dependency module.
type Package struct {
	Name                  string        `json:"name"`
	SPDXID                string        `json:"SPDXID"`
	VersionInfo           string        `json:"versionInfo,omitempty"`
	PackageFileName       string        `json:"packageFileName,omitempty"`
	DownloadLocation      string        `json:"downloadLocation"`
	FilesAnalyzed         bool          `json:"filesAnalyzed"`
	PrimaryPackagePurpose string        `json:"primaryPackagePurpose,omitempty"`
	Checksums             []Checksum    `json:"checksums,omitempty"`
	ExternalRefs          []ExternalRef `json:"externalRefs,omitempty"`
	Comment               string        `json:"comment,omitempty"`
	Annotations           []Annotation  `json:"annotations,omitempty"`
}

// Checksum is a package checksum.
type Checksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

// ExternalRef is a package's identifier elsewhere: here its package URL (purl).
type ExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

// Annotation is a remark on a package: here the main package path and each build setting.
type Annotation struct {
	Annotator      string `json:"annotator"`
	AnnotationDate string `json:"annotationDate"`
	AnnotationType string `json:"annotationType"`
	Comment        string `json:"comment"`
}

// Relationship links two elements: the document describes the main module, which depends on
// the others.
type Relationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// ReadBinary reads the Go build information and the SHA-256 of the binary at path.
func ReadBinary(path string) (*debug.BuildInfo, string, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("read Go build information of %s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, "", fmt.Errorf("hash %s: %w", path, err)
	}
	return bi, hex.EncodeToString(h.Sum(nil)), nil
}

// Setting returns the value of a build setting of bi (GOOS, GOARCH, CGO_ENABLED, vcs.revision,
// ...) and whether it is set.
func Setting(bi *debug.BuildInfo, key string) (string, bool) {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value, true
		}
	}
	return "", false
}

// New returns the document of the binary whose build information is bi and whose SHA-256 is
// binarySHA256 (hex).
func New(bi *debug.BuildInfo, binarySHA256 string, o Options) *Document {
	created := o.Created.UTC().Format(time.RFC3339)
	ids := map[string]bool{}
	note := func(comment string) Annotation {
		return Annotation{Annotator: Tool, AnnotationDate: created, AnnotationType: "OTHER", Comment: comment}
	}

	main := Package{
		Name:                  bi.Main.Path,
		SPDXID:                spdxID(ids, "Package-"+bi.Main.Path),
		VersionInfo:           bi.Main.Version,
		PackageFileName:       o.FileName,
		DownloadLocation:      "NOASSERTION",
		PrimaryPackagePurpose: "APPLICATION",
		Checksums:             []Checksum{{Algorithm: "SHA256", ChecksumValue: binarySHA256}},
		ExternalRefs:          purl(bi.Main.Path, bi.Main.Version),
		Annotations:           []Annotation{note("main package: " + bi.Path)},
	}
	for _, s := range bi.Settings {
		main.Annotations = append(main.Annotations, note("build setting: "+s.Key+"="+s.Value))
	}
	goVersion, _, _ := strings.Cut(strings.TrimPrefix(bi.GoVersion, "go"), " ")
	stdlib := Package{
		Name:                  "stdlib",
		SPDXID:                spdxID(ids, "Package-stdlib"),
		VersionInfo:           goVersion,
		DownloadLocation:      "https://go.dev/dl/",
		PrimaryPackagePurpose: "LIBRARY",
		ExternalRefs:          purl("stdlib", goVersion),
		Comment:               "the Go standard library and runtime of toolchain " + bi.GoVersion,
	}
	doc := &Document{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              o.Name,
		DocumentNamespace: strings.TrimSuffix(o.Namespace, "/") + "/" + binarySHA256,
		CreationInfo:      CreationInfo{Created: created, Creators: []string{Tool}},
		Packages:          []Package{main, stdlib},
		Relationships: []Relationship{
			{SPDXElementID: "SPDXRef-DOCUMENT", RelationshipType: "DESCRIBES", RelatedSPDXElement: main.SPDXID},
			{SPDXElementID: main.SPDXID, RelationshipType: "DEPENDS_ON", RelatedSPDXElement: stdlib.SPDXID},
		},
	}
	for _, d := range bi.Deps {
		p := dependency(d)
		p.SPDXID = spdxID(ids, "Package-"+d.Path+"-"+p.VersionInfo)
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships,
			Relationship{SPDXElementID: main.SPDXID, RelationshipType: "DEPENDS_ON", RelatedSPDXElement: p.SPDXID})
	}
	return doc
}

// dependency is the package of one dependency module; a replaced module is described by its
// replacement's version and hash under its own path, as the program imports it by that path.
func dependency(d *debug.Module) Package {
	version, sum := d.Version, d.Sum
	var comment []string
	if r := d.Replace; r != nil {
		version, sum = r.Version, r.Sum
		comment = append(comment, strings.TrimSpace("replaced by "+r.Path+" "+r.Version))
	}
	p := Package{
		Name:                  d.Path,
		VersionInfo:           version,
		DownloadLocation:      "NOASSERTION",
		PrimaryPackagePurpose: "LIBRARY",
		ExternalRefs:          purl(d.Path, version),
	}
	if sum != "" {
		comment = append(comment, "go.sum "+sum)
		// go.sum's h1: hash is a SHA-256 (over the module's file list and their hashes); SPDX
		// wants it in hex, as other Go SBOM generators write it.
		if raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sum, "h1:")); err == nil &&
			strings.HasPrefix(sum, "h1:") && len(raw) == sha256.Size {
			p.Checksums = []Checksum{{Algorithm: "SHA256", ChecksumValue: hex.EncodeToString(raw)}}
		}
	}
	p.Comment = strings.Join(comment, "; ")
	return p
}

// purl returns the package URL of a Go module (pkg:golang/PATH@VERSION), without a version for
// a module built from a work tree ("(devel)") or replaced by a directory.
func purl(path, version string) []ExternalRef {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	locator := "pkg:golang/" + strings.Join(segs, "/")
	if version != "" && version != "(devel)" {
		locator += "@" + strings.ReplaceAll(url.PathEscape(version), "+", "%2B")
	}
	return []ExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: locator}}
}

var notIDChars = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID returns a unique SPDX identifier made of name's allowed characters.
func spdxID(seen map[string]bool, name string) string {
	id := "SPDXRef-" + strings.Trim(notIDChars.ReplaceAllString(name, "-"), "-")
	for i, base := 2, id; seen[id]; i++ {
		id = fmt.Sprintf("%s-%d", base, i)
	}
	seen[id] = true
	return id
}

// JSON encodes the document, indented, with a final newline.
func (d *Document) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode SPDX document %s: %w", d.Name, err)
	}
	return append(b, '\n'), nil
}
