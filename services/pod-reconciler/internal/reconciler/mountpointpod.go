package reconciler

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/volumecontext"
)

// Labels and annotations of Mountpoint Pods, besides s3csiv2.LabelDriverVersion and the labels
// that make a pod a Mountpoint Pod (mppod.LabelManagedBy, mppod.LabelComponent).
const (
	// LabelVolumeName and LabelVolumeID carry the PV name and volumeHandle when they are valid
	// label values (at most 63 characters); the annotations of the same names always do.
	LabelVolumeName = "s3.csi.scality.com/volume-name"
	LabelVolumeID   = "s3.csi.scality.com/volume-id"
)

// buildMountpointPod returns the Mountpoint Pod name for the volume pv on node. The node-agent
// hands a pod nothing unless mppodcheck.Verify accepts it: the fields it checks are built from
// package mppod's constants, and a test keeps the two in step.
//
// It passes the restricted Pod Security Standard (non-root, no privilege escalation, all
// capabilities dropped, RuntimeDefault seccomp), is bound to the node by required node
// affinity (so the scheduler still accounts for its resources), tolerates every taint (it
// must run wherever the workload runs, even on a node being drained) and mounts no service
// account token (it never calls the API server). Deleted or evicted, it serves the workloads
// still using it for up to its termination grace period (the mounter's first SIGTERM is only
// logged once it serves; it exits when the node-agent unmounts it after the last bind).
func buildMountpointPod(cfg Config, name, node string, pv *corev1.PersistentVolume) (*corev1.Pod, error) {
	attrs := map[string]string{}
	if pv.Spec.CSI != nil {
		attrs = pv.Spec.CSI.VolumeAttributes
	}
	resources, err := mounterResources(cfg.Mountpoint.Resources, attrs)
	if err != nil {
		return nil, fmt.Errorf("build Mountpoint Pod for PersistentVolume %s: %w", pv.Name, err)
	}
	serviceAccount := cfg.Mountpoint.ServiceAccountName
	if sa := attrs[volumecontext.KeyMountpointPodServiceAccountName]; sa != "" {
		serviceAccount = sa
	}
	volumeID := ""
	if pv.Spec.CSI != nil {
		volumeID = pv.Spec.CSI.VolumeHandle
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   cfg.MountpointNamespace,
			Labels:      mountpointLabels(cfg.DriverVersion, pv.Name, volumeID),
			Annotations: map[string]string{LabelVolumeName: pv.Name, LabelVolumeID: volumeID},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			TerminationGracePeriodSeconds: ptr.To(cfg.Mountpoint.gracePeriodSeconds()),
			PriorityClassName:             cfg.Mountpoint.PriorityClassName,
			ServiceAccountName:            serviceAccount,
			ImagePullSecrets:              pullSecrets(cfg.Mountpoint.ImagePullSecrets),
			AutomountServiceAccountToken:  ptr.To(false),
			Affinity:                      nodeAffinity(node),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](mppod.MounterUID),
				RunAsGroup:     ptr.To[int64](mppod.MounterUID),
				FSGroup:        ptr.To[int64](mppod.MounterUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            mppod.ContainerName,
				Image:           cfg.Mountpoint.Image,
				ImagePullPolicy: cfg.Mountpoint.ImagePullPolicy,
				Command:         []string{mppod.MounterCommand},
				Args:            mppod.MounterArgs(),
				Resources:       resources,
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: mppod.CommVolumeName, MountPath: mppod.CommMountPath}},
			}},
			Volumes: []corev1.Volume{{
				Name: mppod.CommVolumeName,
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium:    corev1.StorageMediumMemory,
					SizeLimit: ptr.To(resource.MustParse(fmt.Sprintf("%dMi", mppod.CommDirSizeMiB))),
				}},
			}},
		},
	}
	return pod, nil
}

func mountpointLabels(version, pvName, volumeID string) map[string]string {
	labels := map[string]string{
		s3csiv2.LabelDriverVersion: version,
		mppod.LabelManagedBy:       mppod.ManagedByValue,
		mppod.LabelComponent:       mppod.ComponentMountpoint,
	}
	if len(validation.IsValidLabelValue(pvName)) == 0 {
		labels[LabelVolumeName] = pvName
	}
	if len(validation.IsValidLabelValue(volumeID)) == 0 {
		labels[LabelVolumeID] = volumeID
	}
	return labels
}

func nodeAffinity(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{
					Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}},
			}},
		},
	}}
}

// nodeOf is the node a Mountpoint Pod built by buildMountpointPod is bound to (the inverse of
// nodeAffinity), "" for any other pod.
func nodeOf(pod *corev1.Pod) string {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchFields) != 1 {
		return ""
	}
	f := terms[0].MatchFields[0]
	if f.Key != metav1.ObjectNameField || f.Operator != corev1.NodeSelectorOpIn || len(f.Values) != 1 {
		return ""
	}
	return f.Values[0]
}

// mounterResources is base with each value a volume attribute sets replaced.
func mounterResources(base corev1.ResourceRequirements, attrs map[string]string) (corev1.ResourceRequirements, error) {
	out := *base.DeepCopy()
	for key, set := range map[string]func(resource.Quantity){
		volumecontext.KeyMountpointContainerResourcesRequestsCPU:    func(q resource.Quantity) { setQuantity(&out.Requests, corev1.ResourceCPU, q) },
		volumecontext.KeyMountpointContainerResourcesRequestsMemory: func(q resource.Quantity) { setQuantity(&out.Requests, corev1.ResourceMemory, q) },
		volumecontext.KeyMountpointContainerResourcesLimitsCPU:      func(q resource.Quantity) { setQuantity(&out.Limits, corev1.ResourceCPU, q) },
		volumecontext.KeyMountpointContainerResourcesLimitsMemory:   func(q resource.Quantity) { setQuantity(&out.Limits, corev1.ResourceMemory, q) },
	} {
		v, ok := attrs[key]
		if !ok || v == "" {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return out, fmt.Errorf("volume attribute %s: %w", key, err)
		}
		set(q)
	}
	return out, nil
}

func setQuantity(list *corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	if *list == nil {
		*list = corev1.ResourceList{}
	}
	(*list)[name] = q
}

// isOurMountpointPod reports whether pod is a Mountpoint Pod this service manages.
func isOurMountpointPod(pod *corev1.Pod, namespace string) bool {
	return pod.Namespace == namespace && pod.Labels[mppod.LabelManagedBy] == mppod.ManagedByValue &&
		pod.Labels[mppod.LabelComponent] == mppod.ComponentMountpoint
}

// podEnded reports whether a pod has finished for good.
func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// pullSecrets references the named Secrets of the Mountpoint namespace.
func pullSecrets(names []string) []corev1.LocalObjectReference {
	var refs []corev1.LocalObjectReference
	for _, n := range names {
		refs = append(refs, corev1.LocalObjectReference{Name: n})
	}
	return refs
}
