package options

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Lower bounds that keep a typo from turning the reconciler into a busy loop or a probe into
// a restart loop.
const (
	minResyncPeriod = 10 * time.Second
	minStallTimeout = 30 * time.Second
)

func (o *Options) addReconcilerFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DriverVersion, "driver-version", o.DriverVersion,
		"version label of the Mountpoint Pods and attachments created (env DRIVER_VERSION)")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles,
		"concurrent reconciles of each controller")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod,
		"interval of the full resync that ignores watch events")
	fs.DurationVar(&o.StallTimeout, "stall-timeout", o.StallTimeout,
		"liveness fails when work is pending and no reconcile finished for this long")
	fs.IntVar(&o.EventQueueSize, "event-queue-size", o.EventQueueSize,
		"events waiting to be published before new ones are dropped")
	fs.StringVar(&o.MountpointImage, "mountpoint-image", o.MountpointImage,
		"image of the Mountpoint Pods, running s3csi-mounter (env MOUNTPOINT_IMAGE)")
	fs.StringVar(&o.MountpointImagePullPolicy, "mountpoint-image-pull-policy", o.MountpointImagePullPolicy,
		"Always, IfNotPresent or Never")
	fs.StringVar(&o.MountpointImagePullSecrets, "mountpoint-image-pull-secrets", o.MountpointImagePullSecrets,
		"Secrets in the Mountpoint namespace the Mountpoint Pods pull their image with, comma-separated")
	fs.StringVar(&o.MountpointPriorityClassName, "mountpoint-priority-class-name", o.MountpointPriorityClassName,
		"priority class of the Mountpoint Pods; empty for none")
	fs.DurationVar(&o.MountpointTerminationGracePeriod, "mountpoint-termination-grace-period", o.MountpointTerminationGracePeriod,
		"how long a deleted or evicted Mountpoint Pod may serve the workloads still using it (its terminationGracePeriodSeconds)")
	fs.StringVar(&o.MountpointServiceAccountName, "mountpoint-service-account-name", o.MountpointServiceAccountName,
		"service account of the Mountpoint Pods; empty for the namespace's default")
	fs.StringVar(&o.MountpointCPURequest, "mountpoint-cpu-request", o.MountpointCPURequest, "CPU request of the mounter container, e.g. 100m")
	fs.StringVar(&o.MountpointMemoryRequest, "mountpoint-memory-request", o.MountpointMemoryRequest, "memory request of the mounter container, e.g. 128Mi")
	fs.StringVar(&o.MountpointCPULimit, "mountpoint-cpu-limit", o.MountpointCPULimit, "CPU limit of the mounter container")
	fs.StringVar(&o.MountpointMemoryLimit, "mountpoint-memory-limit", o.MountpointMemoryLimit, "memory limit of the mounter container")
}

func (o *Options) validateReconciler() []error {
	var errs []error
	if msgs := validation.IsValidLabelValue(o.DriverVersion); o.DriverVersion == "" || len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--driver-version %q is not a label value: %s", o.DriverVersion, strings.Join(msgs, "; ")))
	}
	if o.MaxConcurrentReconciles < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-reconciles must be at least 1, got %d", o.MaxConcurrentReconciles))
	}
	if o.ResyncPeriod < minResyncPeriod {
		errs = append(errs, fmt.Errorf("--resync-period must be at least %s, got %s", minResyncPeriod, o.ResyncPeriod))
	}
	if o.StallTimeout < minStallTimeout {
		errs = append(errs, fmt.Errorf("--stall-timeout must be at least %s, got %s", minStallTimeout, o.StallTimeout))
	}
	if o.EventQueueSize < 1 {
		errs = append(errs, fmt.Errorf("--event-queue-size must be at least 1, got %d", o.EventQueueSize))
	}
	if strings.TrimSpace(o.MountpointImage) == "" {
		errs = append(errs, fmt.Errorf("--mountpoint-image must name an image"))
	}
	switch corev1.PullPolicy(o.MountpointImagePullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, fmt.Errorf("--mountpoint-image-pull-policy %q is not Always, IfNotPresent or Never", o.MountpointImagePullPolicy))
	}
	if g := o.MountpointTerminationGracePeriod; g < time.Second || g%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--mountpoint-termination-grace-period must be a whole number of seconds, at least 1s, got %s", g))
	}
	for flag, name := range map[string]string{
		"--mountpoint-priority-class-name":  o.MountpointPriorityClassName,
		"--mountpoint-service-account-name": o.MountpointServiceAccountName,
	} {
		if msgs := validation.IsDNS1123Subdomain(name); name != "" && len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q is not a valid name: %s", flag, name, strings.Join(msgs, "; ")))
		}
	}
	for _, name := range o.MountpointPullSecrets() {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--mountpoint-image-pull-secrets: %q is not a valid Secret name: %s", name, strings.Join(msgs, "; ")))
		}
	}
	if _, err := o.MountpointResources(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// MountpointResources parses the mounter container's resources.
func (o *Options) MountpointResources() (corev1.ResourceRequirements, error) {
	var r corev1.ResourceRequirements
	for _, q := range []struct {
		flag, value string
		list        *corev1.ResourceList
		name        corev1.ResourceName
	}{
		{"--mountpoint-cpu-request", o.MountpointCPURequest, &r.Requests, corev1.ResourceCPU},
		{"--mountpoint-memory-request", o.MountpointMemoryRequest, &r.Requests, corev1.ResourceMemory},
		{"--mountpoint-cpu-limit", o.MountpointCPULimit, &r.Limits, corev1.ResourceCPU},
		{"--mountpoint-memory-limit", o.MountpointMemoryLimit, &r.Limits, corev1.ResourceMemory},
	} {
		if q.value == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.value)
		if err != nil || v.Sign() < 0 {
			return r, fmt.Errorf("%s %q is not a non-negative quantity", q.flag, q.value)
		}
		if *q.list == nil {
			*q.list = corev1.ResourceList{}
		}
		(*q.list)[q.name] = v
	}
	return r, nil
}

// MountpointPullSecrets returns the names of --mountpoint-image-pull-secrets.
func (o *Options) MountpointPullSecrets() []string {
	var names []string
	for n := range strings.SplitSeq(o.MountpointImagePullSecrets, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}
