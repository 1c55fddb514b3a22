// Package integration holds the whole-system tests of s3csi: the four services, NATS JetStream
// and an S3 endpoint started together with testcontainers-go, replay of recorded event streams,
// and fault injection (NATS down, lost, late, duplicated or forged events, services killed
// mid-operation) checking that an event can only delay work, never cause a wrong action
// (DESIGN.md §1).
//
// The tests arrive with later issues. As the house style requires, they fail rather than skip
// when a dependency such as Docker is missing.
package integration
