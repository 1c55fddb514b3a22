// Package reconciler turns "a pod that uses an s3csi volume was scheduled on node N" into a
// Mountpoint Pod on N and a MountpointS3PodAttachment (S3PA) recording which workloads that
// Mountpoint Pod serves, and cleans both up when the workloads end.
//
// Three controllers share one manager and one cache:
//   - workload (pods outside the Mountpoint namespace): finds or creates the S3PA of each
//     volume's sharing key, a Mountpoint Pod when none can take the workload, and records the
//     workload;
//   - attachment (S3PAs): removes ended workloads, marks Mountpoint Pods left without workload
//     needs-unmount, deletes empty S3PAs;
//   - mountpoint (Mountpoint Pods): deletes finished Mountpoint Pods and replaces failed or
//     evicted ones that workloads still need.
package reconciler

import (
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	corev1 "k8s.io/api/core/v1"
)

// Defaults of Config.
const (
	DefaultMaxConcurrentReconciles = 4
	DefaultResyncPeriod            = 5 * time.Minute
	DefaultRecentWriteTTL          = time.Minute
	DefaultTerminationGracePeriod  = 10 * time.Minute
	// unboundRetry is how soon a workload whose claim is not bound yet is looked at again, in
	// case the PVC or PV event that would wake it is missed.
	unboundRetry = 10 * time.Second
	// replaceRetry is how soon a Mountpoint Pod replacement is retried while the old pod is
	// still being deleted.
	replaceRetry = time.Second
	// eventSource is the CloudEvents source of every event the pod-reconciler publishes.
	eventSource = "/s3csi/pod-reconciler"
	// recorderName is the component of the Kubernetes Events written on workloads.
	recorderName = "s3csi-pod-reconciler"
)

// Config configures the controllers.
type Config struct {
	// MountpointNamespace holds the Mountpoint Pods.
	MountpointNamespace string
	// DriverVersion labels what this version creates; Mountpoint Pods of another version get
	// no new workload, so that they drain during an upgrade.
	DriverVersion string
	// Mountpoint shapes the Mountpoint Pods.
	Mountpoint MountpointPodConfig
	// MaxConcurrentReconciles is the number of concurrent reconciles per controller.
	MaxConcurrentReconciles int
	// ResyncPeriod is the interval of the full resync that re-enqueues every relevant object
	// whether or not an event arrived.
	ResyncPeriod time.Duration
	// RecentWriteTTL bounds how long the controllers trust their own writes over a cache that
	// has not seen them yet (the expectations).
	RecentWriteTTL time.Duration
	// SkipNameValidation allows several managers with these controllers in one process (tests).
	SkipNameValidation bool
}

// MountpointPodConfig shapes every Mountpoint Pod.
type MountpointPodConfig struct {
	// Image runs s3csi-mounter.
	Image string
	// ImagePullPolicy of Image.
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets name Secrets in the Mountpoint namespace to pull Image with.
	ImagePullSecrets []string
	// PriorityClassName, when set, is the Mountpoint Pods' priority class.
	PriorityClassName string
	// ServiceAccountName, when set, is the Mountpoint Pods' service account; a volume's
	// mountpointPodServiceAccountName attribute overrides it.
	ServiceAccountName string
	// Resources of the mounter container; a volume's mountpointContainerResources* attributes
	// override each value.
	Resources corev1.ResourceRequirements
	// TerminationGracePeriod is how long a deleted or evicted Mountpoint Pod may serve the
	// workloads still using it before kubelet kills it (whole seconds); zero means
	// DefaultTerminationGracePeriod.
	TerminationGracePeriod time.Duration
}

// gracePeriodSeconds is TerminationGracePeriod in whole seconds, rounded up, with the default
// for zero.
func (c MountpointPodConfig) gracePeriodSeconds() int64 {
	g := c.TerminationGracePeriod
	if g <= 0 {
		g = DefaultTerminationGracePeriod
	}
	return int64((g + time.Second - 1) / time.Second)
}

func (c Config) withDefaults() Config {
	if c.MaxConcurrentReconciles <= 0 {
		c.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if c.ResyncPeriod <= 0 {
		c.ResyncPeriod = DefaultResyncPeriod
	}
	if c.RecentWriteTTL <= 0 {
		c.RecentWriteTTL = DefaultRecentWriteTTL
	}
	if c.Mountpoint.ImagePullPolicy == "" {
		c.Mountpoint.ImagePullPolicy = corev1.PullIfNotPresent
	}
	return c
}

// Publisher takes the events the controllers publish after their writes; it must never block.
type Publisher interface {
	Enqueue(e event.Event) bool
}

// nopPublisher discards events (events disabled).
type nopPublisher struct{}

func (nopPublisher) Enqueue(event.Event) bool { return false }
