// Package conformance holds the conformance suite of s3csi-mounter: each behavior mount-s3
// documents (its doc/SEMANTICS.md) that an application can run into, checked through a real
// mount of the built s3csi-mounter binary over a real versitygw, with the programs applications
// use (sh redirections, dd, cp, tar, rsync, awk, python3, rm, touch), run as an unprivileged
// user.
//
// The suite is one table (suite_test.go): per behavior a stable test name, the behavior in words,
// and its verdict against mount-s3 ("same", "stricter: why", "different: why"). The table in
// docs/s3csi-mounter.md between the conformance markers is generated from it, and
// TestTheDocsTableIsTheSuite fails when the two differ (-update rewrites the docs).
//
// Every program runs under a time limit: a program that does not finish is a hang, reported as a
// failure after its process group and, if it stays blocked in the mount, the mounter are killed,
// so that a hang never hangs the test binary.
//
// The package has no non-test code: run it with
//
//	cd services/mounter && GOWORK=off go test -count=1 ./conformance/
//
// as root with /dev/fuse, versitygw in bin/ (make tools-test) and the programs of make test-deps.
// S3CSI_CONFORMANCE_MOUNTER=/path/to/s3csi-mounter runs the suite against that binary (another
// build or version) instead of one built from this module.
package conformance
