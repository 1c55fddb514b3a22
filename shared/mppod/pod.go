package mppod

// What makes a pod a Mountpoint Pod: the pod-reconciler builds it from these, and the node-agent
// checks them (package mppodcheck) before it hands a pod a FUSE connection or writes keys into
// its comm dir. They are plain strings, so that this package stays free of k8s.io: the mounter
// links it.

// Labels every Mountpoint Pod carries, besides the driver version (s3csiv2.LabelDriverVersion).
const (
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	LabelComponent      = "app.kubernetes.io/component"
	ManagedByValue      = "s3csi-pod-reconciler"
	ComponentMountpoint = "mountpoint"
)

// The one container of a Mountpoint Pod.
const (
	// ContainerName is the name of the mounter container.
	ContainerName = "mountpoint"
	// MounterCommand is the container's entrypoint, s3csi-mounter (built by the mounter module).
	MounterCommand = "/s3csi-mounter"
	// CommMountPath is where the comm emptyDir is mounted in the container.
	CommMountPath = "/comm"
)

// MounterArgs starts s3csi-mounter in socket mode: it serves mount.sock in the comm dir and
// waits for the node-agent to send the FUSE fd, bucket, arguments and environment. The
// handshake's own flags are the mounter's to define; this is the only one the pod sets.
func MounterArgs() []string { return []string{"--comm-dir=" + CommMountPath} }
