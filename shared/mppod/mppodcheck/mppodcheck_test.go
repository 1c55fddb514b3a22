package mppodcheck_test

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/mppod/mppodcheck"
)

var (
	name = mppod.Name("0c2f6e3c-6b8e-4c57-9d36-0e7c4f7f9a11", "s3-pv")
	want = mppodcheck.Expected{Namespace: mppod.DefaultNamespace, NodeName: "node-a", Image: fixture.MounterImage}
)

// mod changes a copy of the fixture pod.
type mod = func(*corev1.Pod)

func TestVerify(t *testing.T) {
	container := func(f func(*corev1.Container)) mod { return func(p *corev1.Pod) { f(&p.Spec.Containers[0]) } }
	csc := func(f func(*corev1.SecurityContext)) mod {
		return container(func(c *corev1.Container) { f(c.SecurityContext) })
	}
	psc := func(f func(*corev1.PodSecurityContext)) mod { return func(p *corev1.Pod) { f(p.Spec.SecurityContext) } }
	tests := []struct {
		name   string
		mod    mod
		expect func(*mppodcheck.Expected)
		want   string // in the error; "" when the pod passes
	}{
		{name: "the pod the pod-reconciler builds passes", mod: func(*corev1.Pod) {}},
		{name: "another tag of the mounter's repository passes (a pod of an earlier release)", mod: fixture.WithImage("s3csi/mounter:0.0.9")},
		{name: "a digest of the mounter's repository passes", mod: fixture.WithImage("s3csi/mounter@sha256:0123")},
		{name: "any image passes when the mounter image is not known", mod: fixture.WithImage("evil/mounter:1"),
			expect: func(e *mppodcheck.Expected) { e.Image = "" }},
		{name: "another image is refused", mod: fixture.WithImage("evil.example/steal-keys:latest"),
			want: `image "evil.example/steal-keys:latest" is not from the mounter image's repository "s3csi/mounter"`},
		{name: "a repository that only starts like the mounter's is refused", mod: fixture.WithImage("s3csi/mounter-debug:test"),
			want: "is not from the mounter image's repository"},
		{name: "an extra container is refused", mod: fixture.WithContainer("thief", "busybox"), want: `2 containers (mountpoint, thief), not one`},
		{name: "an init container is refused", mod: func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "first", Image: "busybox"}}
		}, want: "1 init containers (first)"},
		{name: "an ephemeral container is refused", mod: func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger"}}}
		}, want: "1 ephemeral containers (debugger)"},
		{name: "a hostPath volume is refused", mod: fixture.WithHostPath("host", "/"), want: `volume "host" (hostPath /) is not the comm emptyDir`},
		{name: "a comm dir on disk is refused", mod: func(p *corev1.Pod) { p.Spec.Volumes[0].EmptyDir.Medium = "" },
			want: `volume comm is an emptyDir of medium "", not Memory`},
		{name: "a pod without labels is refused", mod: fixture.WithoutLabels(),
			want: `label app.kubernetes.io/managed-by is unset, not "s3csi-pod-reconciler"; label app.kubernetes.io/component is unset`},
		{name: "another namespace is refused", mod: fixture.InNamespace("default"), want: `namespace "default", not "mount-s3"`},
		{name: "another node is refused", mod: fixture.OnNode("node-b"), want: `bound to node "node-b", not "node-a"`},
		{name: "a name that is no Mountpoint Pod name is refused", mod: func(p *corev1.Pod) { p.Name = "mp-x" }, want: "invalid Mountpoint Pod name"},
		{name: "the host's network is refused", mod: func(p *corev1.Pod) { p.Spec.HostNetwork = true }, want: "hostNetwork true"},
		{name: "the host's pids are refused", mod: func(p *corev1.Pod) { p.Spec.HostPID = true }, want: "hostPID true"},
		{name: "a mounted token is refused", mod: func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }, want: "automountServiceAccountToken is not false"},
		{name: "another command is refused", mod: container(func(c *corev1.Container) { c.Command = []string{"/bin/sh", "-c", "cat /comm/credentials/*"} }),
			want: `command ["/bin/sh" "-c" "cat /comm/credentials/*"], not ["/s3csi-mounter"]`},
		{name: "other arguments are refused", mod: container(func(c *corev1.Container) { c.Args = append(c.Args, "--debug") }), want: "args"},
		{name: "another container name is refused", mod: container(func(c *corev1.Container) { c.Name = "main" }), want: `container "main", not "mountpoint"`},
		{name: "an environment variable is refused", mod: container(func(c *corev1.Container) {
			c.Env = []corev1.EnvVar{{Name: "S3CSI_MOUNT_S3_PATH", Value: "/tmp/x"}}
		}), want: "environment variables (1 env, 0 envFrom)"},
		{name: "another mount of the comm dir is refused", mod: container(func(c *corev1.Container) { c.VolumeMounts[0].MountPath = "/elsewhere" }),
			want: "volume mounts are not only comm at /comm"},
		{name: "an exec probe is refused", mod: container(func(c *corev1.Container) {
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		}), want: "lifecycle hooks or probes"},
		{name: "a pod run as root is refused", mod: psc(func(s *corev1.PodSecurityContext) { s.RunAsUser = ptr.To[int64](0) }), want: "pod runAsUser is 0, not 1000"},
		{name: "a pod without a user is refused", mod: psc(func(s *corev1.PodSecurityContext) { s.RunAsUser = nil }), want: "pod runAsUser is unset, not 1000"},
		{name: "a pod in another group is refused", mod: psc(func(s *corev1.PodSecurityContext) { s.RunAsGroup = ptr.To[int64](0) }), want: "pod runAsGroup is 0"},
		{name: "a pod that may run as root is refused", mod: psc(func(s *corev1.PodSecurityContext) { s.RunAsNonRoot = nil }), want: "pod runAsNonRoot is not true"},
		{name: "a container run as root is refused", mod: csc(func(s *corev1.SecurityContext) { s.RunAsUser = ptr.To[int64](0) }), want: "container runAsUser is 0"},
		{name: "a container that may run as root is refused", mod: csc(func(s *corev1.SecurityContext) { s.RunAsNonRoot = ptr.To(false) }), want: "container runAsNonRoot is false"},
		{name: "a privileged container is refused", mod: csc(func(s *corev1.SecurityContext) { s.Privileged = ptr.To(true) }), want: "privileged"},
		{name: "privilege escalation is refused", mod: csc(func(s *corev1.SecurityContext) { s.AllowPrivilegeEscalation = nil }),
			want: "allowPrivilegeEscalation is not false"},
		{name: "capabilities not all dropped are refused", mod: csc(func(s *corev1.SecurityContext) { s.Capabilities.Drop = []corev1.Capability{"NET_RAW"} }),
			want: "capabilities do not drop ALL"},
		{name: "an added capability is refused", mod: csc(func(s *corev1.SecurityContext) { s.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"} }),
			want: "capabilities add [SYS_ADMIN]"},
		{name: "an unconfined container is refused", mod: csc(func(s *corev1.SecurityContext) {
			s.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}), want: "seccomp profile is Unconfined"},
		{name: "a container without a security context is refused", mod: container(func(c *corev1.Container) { c.SecurityContext = nil }),
			want: "allowPrivilegeEscalation is not false; capabilities do not drop ALL"},
		{name: "a pod without a security context is refused", mod: func(p *corev1.Pod) { p.Spec.SecurityContext = nil },
			want: "pod runAsUser is unset"},
		{name: "the container's seccomp profile stands for the pod's", mod: func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil }},
		{name: "a pod without containers is refused", mod: func(p *corev1.Pod) { p.Spec.Containers = nil }, want: "0 containers (), not one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := fixture.MountpointPod(name, "node-a", tt.mod)
			e := want
			if tt.expect != nil {
				tt.expect(&e)
			}
			err := mppodcheck.Verify(pod, e)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Verify = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, mppodcheck.ErrImpostor) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify = %v, want an ErrImpostor naming %q", err, tt.want)
			}
		})
	}
}

func TestVerifyNamesEveryDifference(t *testing.T) {
	pod := fixture.MountpointPod(name, "node-a", fixture.WithImage("evil/x:1"), fixture.WithHostPath("host", "/etc"), fixture.WithoutLabels())
	err := mppodcheck.Verify(pod, want)
	for _, s := range []string{"image", "hostPath /etc", "label app.kubernetes.io/managed-by"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("Verify = %v, want it to name %q", err, s)
		}
	}
	if err := mppodcheck.Verify(nil, want); !errors.Is(err, mppodcheck.ErrImpostor) {
		t.Errorf("Verify(nil) = %v, want ErrImpostor", err)
	}
}

func TestRepository(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"a tag is cut", "s3csi/mounter:0.1.0", "s3csi/mounter"},
		{"no tag is kept", "s3csi/mounter", "s3csi/mounter"},
		{"a digest is cut", "s3csi/mounter@sha256:abcd", "s3csi/mounter"},
		{"a tag and a digest are cut", "s3csi/mounter:0.1.0@sha256:abcd", "s3csi/mounter"},
		{"a registry port is kept", "registry:5000/s3csi/mounter", "registry:5000/s3csi/mounter"},
		{"a registry port and a tag", "registry:5000/s3csi/mounter:v1", "registry:5000/s3csi/mounter"},
		{"empty stays empty", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := mppodcheck.Repository(tt.in); got != tt.want {
				t.Errorf("Repository(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
