// Package testfs names what the test filesystem shows: the one that the mounter module's
// fusetest-mounter serves (services/mounter/internal/fusetest) in place of the S3 filesystem,
// so that the node-agent's tests can check a mount through it without importing the mounter.
package testfs

// Names and content of the files the test filesystem shows.
const (
	// HelloName is a fixed file holding HelloContent.
	HelloName = "hello.txt"
	// BucketName holds the bucket of the mount request.
	BucketName = "bucket.txt"
	// ProfileName shows the current content of the credentials file the request names.
	ProfileName = "credentials"
	// ArgsName holds the mount-s3 arguments of the request, one a line.
	ArgsName     = "args.txt"
	HelloContent = "hello from a real FUSE mount\n"
	// FailBucket is a bucket the test filesystem refuses to serve, as a real one refuses a
	// missing bucket.
	FailBucket = "no-such-bucket"
)

// MounterPackage is the fusetest-mounter's main package, relative to services/mounter.
const MounterPackage = "./internal/fusetest/cmd/fusetest-mounter"
