// Package bench compares s3csi-mounter with the FUSE S3 clients Debian ships (s3fs and rclone)
// and with raw aws-sdk-go-v2 transfers, against one versitygw on loopback. It is a Go benchmark
// so that `go test -run='^$' -bench=. ./bench` prints every figure in one run; it installs
// nothing and fails, naming the apt-get command, when a client is missing.
package bench
