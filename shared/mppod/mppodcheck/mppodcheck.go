// Package mppodcheck tells the Mountpoint Pod the pod-reconciler builds from any other pod of the
// same name.
//
// Problem: the node-agent (root) finds a Mountpoint Pod by name, then hands it a FUSE connection
// and writes the volume's keys into its comm dir. Whoever may create pods in the Mountpoint
// namespace can create a pod of that name before the pod-reconciler does (during a hand-over the
// name is free until the replacement is created) and run there whatever reads the keys.
// Solution: before the node-agent hands a pod anything it checks (Verify) that the pod is what
// the pod-reconciler builds in every field that decides which code reaches the comm dir and the
// connection, and refuses it, naming each difference, when it is not.
// Invariant: a pod Verify accepts runs one container, s3csi-mounter from the mounter image's
// repository with the pod-reconciler's arguments and no environment of its own, as
// mppod.MounterUID, without privilege, host namespaces, service account token or any volume but
// the comm emptyDir, on the expected node.
//
// It is a package of its own because it imports k8s.io/api: package mppod, which the mounter
// links, stays free of it.
package mppodcheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3csi/shared/mppod"
)

// ErrImpostor is wrapped by every error of Verify: the pod is not what the pod-reconciler builds.
var ErrImpostor = errors.New("not the Mountpoint Pod the pod-reconciler builds")

// Expected is what the checking side knows a Mountpoint Pod must be.
type Expected struct {
	// Namespace is the namespace of the Mountpoint Pods.
	Namespace string
	// NodeName is the node the pod must be bound to (spec.nodeName).
	NodeName string
	// Image is the mounter image the pod-reconciler sets; empty means the image is not checked.
	// The pod's image must be from the same repository (the reference without its tag and
	// digest): a Mountpoint Pod that an earlier release created runs the earlier tag and serves
	// its workloads across an upgrade, so the upgraded node-agent must still accept it.
	Image string
}

// Verify returns nil when pod is a Mountpoint Pod as the pod-reconciler builds it for want, else
// an error wrapping ErrImpostor that names every difference. It checks what decides which code
// can reach the comm dir or the FUSE connection (see the package doc); it does not check the
// service account name (a volume attribute may set any, and with no token mounted it gives the
// container nothing), resources, tolerations, affinity, annotations or the priority class.
func Verify(pod *corev1.Pod, want Expected) error {
	if pod == nil {
		return fmt.Errorf("%w: no pod", ErrImpostor)
	}
	var d diffs
	checkMeta(&d, pod, want)
	checkPodSpec(&d, &pod.Spec, want)
	if len(pod.Spec.Containers) == 1 {
		checkContainer(&d, &pod.Spec.Containers[0], pod.Spec.SecurityContext, want)
	}
	checkVolumes(&d, pod.Spec.Volumes)
	if len(d) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrImpostor, strings.Join(d, "; "))
}

// diffs collects the differences found, each a short phrase naming the field.
type diffs []string

func (d *diffs) add(format string, a ...any) { *d = append(*d, fmt.Sprintf(format, a...)) }

func checkMeta(d *diffs, pod *corev1.Pod, want Expected) {
	if err := mppod.ValidateName(pod.Name); err != nil {
		d.add("name: %v", err)
	}
	if pod.Namespace != want.Namespace {
		d.add("namespace %q, not %q", pod.Namespace, want.Namespace)
	}
	for _, l := range [...]struct{ key, value string }{
		{mppod.LabelManagedBy, mppod.ManagedByValue}, {mppod.LabelComponent, mppod.ComponentMountpoint},
	} {
		if got, ok := pod.Labels[l.key]; !ok || got != l.value {
			d.add("label %s is %s, not %q", l.key, quoteOrUnset(got, ok), l.value)
		}
	}
}

func checkPodSpec(d *diffs, spec *corev1.PodSpec, want Expected) {
	if spec.NodeName != want.NodeName {
		d.add("bound to node %q, not %q", spec.NodeName, want.NodeName)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		d.add("shares the host's namespaces (hostNetwork %t, hostPID %t, hostIPC %t)", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		d.add("automountServiceAccountToken is not false")
	}
	if n := len(spec.InitContainers); n > 0 {
		d.add("%d init containers (%s), not none", n, containerNames(spec.InitContainers))
	}
	if n := len(spec.EphemeralContainers); n > 0 {
		names := make([]string, 0, n)
		for _, c := range spec.EphemeralContainers {
			names = append(names, c.Name)
		}
		d.add("%d ephemeral containers (%s), not none", n, strings.Join(names, ", "))
	}
	if n := len(spec.Containers); n != 1 {
		d.add("%d containers (%s), not one", n, containerNames(spec.Containers))
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if !isID(psc.RunAsUser, mppod.MounterUID) {
		d.add("pod runAsUser is %s, not %d", idOrUnset(psc.RunAsUser), mppod.MounterUID)
	}
	if !isID(psc.RunAsGroup, mppod.MounterUID) {
		d.add("pod runAsGroup is %s, not %d", idOrUnset(psc.RunAsGroup), mppod.MounterUID)
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		d.add("pod runAsNonRoot is not true")
	}
}

// checkContainer checks the one container; where it may override the pod's security context,
// the value in effect is checked.
func checkContainer(d *diffs, c *corev1.Container, psc *corev1.PodSecurityContext, want Expected) {
	if c.Name != mppod.ContainerName {
		d.add("container %q, not %q", c.Name, mppod.ContainerName)
	}
	if !slices.Equal(c.Command, []string{mppod.MounterCommand}) {
		d.add("command %q, not %q", c.Command, []string{mppod.MounterCommand})
	}
	if !slices.Equal(c.Args, mppod.MounterArgs()) {
		d.add("args %q, not %q", c.Args, mppod.MounterArgs())
	}
	if want.Image != "" && Repository(c.Image) != Repository(want.Image) {
		d.add("image %q is not from the mounter image's repository %q", c.Image, Repository(want.Image))
	}
	if len(c.Env) > 0 || len(c.EnvFrom) > 0 {
		d.add("the container sets environment variables (%d env, %d envFrom), not none", len(c.Env), len(c.EnvFrom))
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != mppod.CommVolumeName || c.VolumeMounts[0].MountPath != mppod.CommMountPath ||
		c.VolumeMounts[0].SubPath != "" || c.VolumeMounts[0].SubPathExpr != "" {
		d.add("volume mounts are not only %s at %s", mppod.CommVolumeName, mppod.CommMountPath)
	}
	if len(c.VolumeDevices) > 0 {
		d.add("%d volume devices, not none", len(c.VolumeDevices))
	}
	if c.Lifecycle != nil || c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil {
		d.add("the container has lifecycle hooks or probes, which run commands in it")
	}
	checkContainerSecurity(d, c.SecurityContext, psc)
}

func checkContainerSecurity(d *diffs, csc *corev1.SecurityContext, psc *corev1.PodSecurityContext) {
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if csc.Privileged != nil && *csc.Privileged {
		d.add("privileged")
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		d.add("allowPrivilegeEscalation is not false")
	}
	if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
		d.add("capabilities do not drop ALL")
	}
	if csc.Capabilities != nil && len(csc.Capabilities.Add) > 0 {
		d.add("capabilities add %v", csc.Capabilities.Add)
	}
	if csc.RunAsUser != nil && *csc.RunAsUser != mppod.MounterUID {
		d.add("container runAsUser is %d, not %d", *csc.RunAsUser, mppod.MounterUID)
	}
	if csc.RunAsGroup != nil && *csc.RunAsGroup != mppod.MounterUID {
		d.add("container runAsGroup is %d, not %d", *csc.RunAsGroup, mppod.MounterUID)
	}
	if csc.RunAsNonRoot != nil && !*csc.RunAsNonRoot {
		d.add("container runAsNonRoot is false")
	}
	if csc.ProcMount != nil && *csc.ProcMount != corev1.DefaultProcMount {
		d.add("procMount %s, not Default", *csc.ProcMount)
	}
	seccomp := csc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		got := "unset"
		if seccomp != nil {
			got = string(seccomp.Type)
		}
		d.add("seccomp profile is %s, not RuntimeDefault", got)
	}
}

func checkVolumes(d *diffs, volumes []corev1.Volume) {
	comm := false
	for _, v := range volumes {
		switch {
		case v.Name == mppod.CommVolumeName && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && !comm:
			comm = true
		case v.Name == mppod.CommVolumeName && v.EmptyDir != nil:
			d.add("volume %s is an emptyDir of medium %q, not Memory", v.Name, v.EmptyDir.Medium)
		default:
			d.add("volume %q (%s) is not the comm emptyDir", v.Name, volumeKind(v.VolumeSource))
		}
	}
	if !comm {
		d.add("no %s emptyDir volume in memory", mppod.CommVolumeName)
	}
}

// volumeKind names the source of a volume for a message.
func volumeKind(s corev1.VolumeSource) string {
	switch {
	case s.HostPath != nil:
		return "hostPath " + s.HostPath.Path
	case s.EmptyDir != nil:
		return "emptyDir"
	case s.Secret != nil:
		return "secret"
	case s.ConfigMap != nil:
		return "configMap"
	case s.Projected != nil:
		return "projected"
	case s.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case s.CSI != nil:
		return "csi"
	case s.Ephemeral != nil:
		return "ephemeral"
	case s.Image != nil:
		return "image"
	default:
		return "another source"
	}
}

// Repository is an image reference without its digest and tag:
// "registry:5000/s3csi/mounter:v1@sha256:…" is "registry:5000/s3csi/mounter".
func Repository(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		image = image[:i]
	}
	return image
}

func containerNames(cs []corev1.Container) string {
	names := make([]string, 0, len(cs))
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

func isID(p *int64, want int64) bool { return p != nil && *p == want }

func idOrUnset(p *int64) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

func quoteOrUnset(s string, ok bool) string {
	if !ok {
		return "unset"
	}
	return fmt.Sprintf("%q", s)
}
