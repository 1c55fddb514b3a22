// Package integration holds the whole-system tests of s3csi: the four services, NATS JetStream
// and an S3 endpoint started together with testcontainers-go, replay of recorded event streams,
// and fault injection (NATS down, lost, late, duplicated or forged events, services killed
// mid-operation) checking that an event can only delay work, never cause a wrong action.
//
// These tests fail rather than skip when a dependency such as the container engine is missing.
// cmd/s3csi-devstack is the local stack that `make run` starts.
package integration
