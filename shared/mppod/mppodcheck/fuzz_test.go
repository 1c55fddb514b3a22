package mppodcheck_test

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/mppod/mppodcheck"
)

// FuzzVerify: a pod comes from the API server, where anyone allowed to create pods in the
// Mountpoint namespace wrote it. Verify never panics on it, and what it accepts holds the
// package's invariant, checked here independently.
func FuzzVerify(f *testing.F) {
	for _, p := range []*corev1.Pod{
		fixture.MountpointPod(name, "node-a"),
		fixture.MountpointPod(name, "node-a", fixture.WithContainer("thief", "busybox"), fixture.WithHostPath("h", "/")),
		{},
	} {
		b, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"spec":{"containers":[{}],"securityContext":null}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var pod corev1.Pod
		if json.Unmarshal(data, &pod) != nil {
			return
		}
		if mppodcheck.Verify(&pod, want) != nil {
			return
		}
		s := pod.Spec
		if pod.Namespace != want.Namespace || s.NodeName != want.NodeName || len(s.Containers) != 1 ||
			len(s.InitContainers)+len(s.EphemeralContainers) != 0 || s.HostNetwork || s.HostPID || s.HostIPC {
			t.Fatalf("Verify accepted a pod of another shape: %+v", pod)
		}
		c := s.Containers[0]
		if mppodcheck.Repository(c.Image) != "s3csi/mounter" || !slices.Equal(c.Command, []string{mppod.MounterCommand}) || len(c.Env) > 0 {
			t.Fatalf("Verify accepted container %+v", c)
		}
		if len(s.Volumes) != 1 || s.Volumes[0].EmptyDir == nil || s.Volumes[0].HostPath != nil {
			t.Fatalf("Verify accepted volumes %+v", s.Volumes)
		}
		if s.SecurityContext == nil || s.SecurityContext.RunAsUser == nil || *s.SecurityContext.RunAsUser != mppod.MounterUID ||
			(c.SecurityContext.RunAsUser != nil && *c.SecurityContext.RunAsUser != mppod.MounterUID) ||
			(c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged) {
			t.Fatalf("Verify accepted security contexts %+v, %+v", s.SecurityContext, c.SecurityContext)
		}
	})
}
