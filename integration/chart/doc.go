// Package chart tests the Helm chart charts/s3csi with the pinned helm binary: the manifests
// rendered from each values file of charts/s3csi/ci match golden files (regenerate them with
// `go test ./chart -update`), the rendered objects are consistent with one another, and bad
// values are refused with a message naming the field. A values file of the Scality CSI Driver for
// S3 v2.2 chart renders, each of its names working, moved onto s3csi's name with a note, or refused
// with the reason (scality_test.go).
package chart
