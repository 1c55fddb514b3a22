// Package chart tests the Helm chart charts/s3csi with the pinned helm binary: the manifests
// rendered from each values file of charts/s3csi/ci match golden files (regenerate them with
// `go test ./chart -update`), the rendered objects are consistent with one another, and bad
// values are refused with a message naming the field.
package chart
