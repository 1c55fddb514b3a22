// Package version holds the driver version that every binary reports (GetPluginInfo, the
// Mountpoint Pods' driver-version label, the mounter's S3 user agent). It is set at link time,
// as `make build` does from the chart's appVersion:
//
//	go build -ldflags "-X github.com/s3csi/s3csi/shared/version.Version=2.0.0" ./cmd/...
package version

// Version is the driver version; "dev" in a build without the -X flag.
var Version = "dev"
