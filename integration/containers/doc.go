// Package containers runs the four s3csi services and NATS from their images (`make images`)
// under Podman, through testcontainers-go, against a real API server (envtest) and versitygw on
// the host: the whole mount path with every service a container, the NATS container stopped and
// restarted mid-flow, a service container cut from the bus and reconnected, and two pod-reconciler
// containers handing the lease over.
//
// The tests carry the build tag containers and run with `make test-containers`, which builds the
// images and installs Podman first. The package starts its own Podman API service on a private
// socket and store (podman_test.go, over integration/podmanenv), so it never touches the host's
// containers; without podman it fails and says how to get it.
package containers
