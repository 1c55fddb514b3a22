// Package integration holds the whole-system tests of s3csi: the real pod-reconciler and janitor
// binaries run together against one API server and NATS (convergence), and the event stream of
// a real scenario replayed to fresh services with duplicates, reordering, drops and forged
// events mixed in, checking that an event can only delay work, never cause a wrong action.
//
// These tests fail rather than skip when a dependency is missing. The services as containers
// under Podman are tested in containers/ (build tag containers); the e2e suite on the
// single-node cluster is in e2e/ (build tag e2e); cmd/s3csi-devstack is the local stack that
// `make run` starts.
package integration
