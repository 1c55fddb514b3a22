// Package testenv starts the real components that s3csi is tested against: a kube-apiserver and
// etcd (envtest, from binaries built from source by `make envtest-bins`), an embedded NATS
// JetStream server, a versitygw S3 server, and kubelet-like directories. It is for tests and the
// local stack only; no service imports it.
//
// Every Start function returns an error and a handle with Stop, so a long-running program can use
// it; the StartX(t) wrappers fail the test, with the command that installs what is missing, and
// register the cleanup.
package testenv
