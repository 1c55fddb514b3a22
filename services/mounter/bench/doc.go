// Package bench compares s3csi-mounter with the FUSE S3 clients Debian ships (s3fs and rclone)
// and with raw aws-sdk-go-v2 transfers, against one versitygw on loopback, running the fio job
// shapes of the field through each client. It is a Go benchmark so that
// `go test -run='^$' -bench=. ./bench` prints every figure in one run; it installs nothing and
// fails, naming the apt-get command, when fio or a client is missing. It needs root: it mounts,
// pins the server and the clients to separate CPUs, and touches the machine's free memory.
package bench
