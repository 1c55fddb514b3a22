// Package migrate holds what a switch between the Scality CSI Driver for S3 and s3csi needs
// beyond Helm (docs/migrating-from-scality.md).
package migrate

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// KeepPolicy is the annotation with which Helm leaves a resource in place when it uninstalls
// the release that holds it, or upgrades it to a chart that no longer renders it.
const KeepPolicy = "helm.sh/resource-policy"

// maxManifests bounds what KeepNamespaces reads: a chart's rendering, not a stream without end.
const maxManifests = 64 << 20

// KeepNamespaces is a Helm post-renderer: it copies the YAML manifests of r to w, adding
// KeepPolicy "keep" to every Namespace, and returns how many it changed. Helm decides what to
// keep from the manifest it recorded, not from the live object, so a Namespace is kept through
// an uninstall only once a `helm upgrade --post-renderer` recorded it with the annotation.
//
// Problem: the Scality driver's chart renders the Mountpoint Pods' namespace as a plain
// template, so `helm uninstall` deletes it, every Mountpoint Pod in it, and every live mount.
// Solution: upgrade that release once with this post-renderer (nothing else changes), then
// uninstall it; the namespace and its Mountpoint Pods stay, and s3csi takes them over.
// Invariant: every other manifest is copied byte for byte.
func KeepNamespaces(r io.Reader, w io.Writer) (int, error) {
	docs := utilyaml.NewYAMLReader(bufio.NewReader(io.LimitReader(r, maxManifests+1)))
	bw := bufio.NewWriter(w)
	changed, read := 0, 0
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return changed, fmt.Errorf("read the manifests: %w", err)
		}
		if read += len(doc); read > maxManifests {
			return changed, fmt.Errorf("the manifests exceed %d MiB", maxManifests>>20)
		}
		out, ok, err := keep(doc)
		if err != nil {
			return changed, err
		}
		if ok {
			changed++
		}
		if _, err := bw.WriteString("---\n"); err != nil {
			return changed, err
		}
		if _, err := bw.Write(out); err != nil {
			return changed, err
		}
	}
	return changed, bw.Flush()
}

// keep returns doc with KeepPolicy "keep" when it is a Namespace, and whether it is one.
func keep(doc []byte) ([]byte, bool, error) {
	var u unstructured.Unstructured
	if err := yaml.Unmarshal(doc, &u.Object); err != nil {
		return nil, false, fmt.Errorf("decode a manifest: %w", err)
	}
	if u.Object == nil || u.GetAPIVersion() != "v1" || u.GetKind() != "Namespace" {
		return doc, false, nil
	}
	a := u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[KeepPolicy] = "keep"
	u.SetAnnotations(a)
	out, err := yaml.Marshal(u.Object)
	if err != nil {
		return nil, false, fmt.Errorf("encode Namespace %s: %w", u.GetName(), err)
	}
	return out, true, nil
}
