//go:build containers

package containers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
)

// mountpointKubelet plays kubelet for the Mountpoint Pods the pod-reconciler creates (envtest
// has no kubelet): it runs each pod's container as the spec says (image, command, args, user,
// the comm emptyDir where the node-agent looks for it), sets the pod Running, and once the
// container exits, Succeeded or Failed by its exit code. A deleted pod's container is removed.
type mountpointKubelet struct {
	s       *stack
	mu      sync.Mutex
	running map[types.UID]testcontainers.Container
	started map[types.UID]int // how many containers each pod had
}

func (s *stack) startMountpointKubelet() *mountpointKubelet {
	k := &mountpointKubelet{s: s, running: map[types.UID]testcontainers.Container{}, started: map[types.UID]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if err := k.sync(ctx); err != nil && ctx.Err() == nil {
				s.t.Logf("mountpoint kubelet: %v", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	s.t.Cleanup(func() {
		cancel()
		<-done
		k.mu.Lock()
		defer k.mu.Unlock()
		for uid, c := range k.running {
			if s.t.Failed() {
				s.t.Logf("the end of Mountpoint Pod container %s's output:\n%s", uid, tail(logsOf(c), 40))
			}
			_ = testcontainers.TerminateContainer(c)
		}
	})
	return k
}

// containers is how many containers the pod's uid has had started.
func (k *mountpointKubelet) containers(uid types.UID) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.started[uid]
}

func (k *mountpointKubelet) sync(ctx context.Context) error {
	pods := &corev1.PodList{}
	if err := k.s.api.Client.List(ctx, pods, client.InNamespace(mppod.DefaultNamespace)); err != nil {
		return err
	}
	live := map[types.UID]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		live[pod.UID] = true
		k.mu.Lock()
		c, ok := k.running[pod.UID]
		k.mu.Unlock()
		switch {
		case pod.DeletionTimestamp != nil:
			// Kubelet's part of a deletion: stop the container, then remove the pod for good.
			if ok {
				_ = testcontainers.TerminateContainer(c)
			}
			if err := k.s.api.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete Mountpoint Pod %s: %w", pod.Name, err)
			}
		case pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil:
			// The scheduler's part: the pod's node affinity names the one node.
			if err := k.s.api.Client.SubResource("binding").Create(ctx, pod, fixture.Binding(pod, k.s.node)); err != nil {
				return fmt.Errorf("bind Mountpoint Pod %s: %w", pod.Name, err)
			}
		case !ok && pod.Status.Phase == corev1.PodPending:
			if err := k.startPod(ctx, pod); err != nil {
				return fmt.Errorf("start Mountpoint Pod %s: %w", pod.Name, err)
			}
			if err := k.setRunning(ctx, pod); err != nil {
				return err
			}
		case ok && pod.Status.Phase == corev1.PodPending:
			if err := k.setRunning(ctx, pod); err != nil {
				return err
			}
		case ok && pod.Status.Phase == corev1.PodRunning:
			state, err := c.State(ctx)
			if err != nil || state.Running {
				continue
			}
			pod.Status.Phase = corev1.PodSucceeded
			if state.ExitCode != 0 {
				pod.Status.Phase = corev1.PodFailed
			}
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(state.ExitCode), Reason: "Completed"},
			}}}
			if err := k.s.api.Client.Status().Update(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("set Mountpoint Pod %s %s: %w", pod.Name, pod.Status.Phase, err)
			}
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for uid, c := range k.running {
		if !live[uid] {
			_ = testcontainers.TerminateContainer(c)
			delete(k.running, uid)
		}
	}
	return nil
}

func (k *mountpointKubelet) startPod(ctx context.Context, pod *corev1.Pod) error {
	spec := pod.Spec.Containers[0]
	var commPath string
	for _, m := range spec.VolumeMounts {
		if m.Name == mppod.CommVolumeName {
			commPath = m.MountPath
		}
	}
	if commPath == "" || pod.Spec.SecurityContext == nil || pod.Spec.SecurityContext.RunAsUser == nil {
		return fmt.Errorf("the pod has no %s volume mount or no runAsUser: %+v", mppod.CommVolumeName, pod.Spec)
	}
	uid := *pod.Spec.SecurityContext.RunAsUser
	comm := filepath.Join(k.s.kubelet.Root, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", mppod.CommVolumeName)
	// An emptyDir as kubelet makes it for a pod with an fsGroup: mode 0777, the group the
	// fsGroup, setgid so that what the node-agent writes there is the group's too.
	if err := os.MkdirAll(comm, 0o777); err != nil {
		return err
	}
	if fsGroup := pod.Spec.SecurityContext.FSGroup; fsGroup != nil {
		if err := os.Chown(comm, 0, int(*fsGroup)); err != nil {
			return err
		}
	}
	if err := os.Chmod(comm, 0o777|os.ModeSetgid); err != nil {
		return err
	}
	user := strconv.FormatInt(uid, 10) + ":" + strconv.FormatInt(uid, 10)
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := testcontainers.GenericContainer(startCtx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Name:       "mp-" + string(pod.UID)[:8] + "-" + k.s.id,
			Image:      spec.Image,
			Entrypoint: spec.Command,
			Cmd:        spec.Args,
			Networks:   []string{k.s.apiNet},
			ConfigModifier: func(c *container.Config) {
				c.User = user
			},
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.Binds = append(hc.Binds, comm+":"+commPath)
			},
		},
		Started: true,
	})
	if err != nil {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		return err
	}
	k.mu.Lock()
	k.running[pod.UID] = c
	k.started[pod.UID]++
	k.mu.Unlock()
	return nil
}

func (k *mountpointKubelet) setRunning(ctx context.Context, pod *corev1.Pod) error {
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Ready: true, Started: ptr.To(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if err := k.s.api.Client.Status().Update(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("set Mountpoint Pod %s Running: %w", pod.Name, err)
	}
	return nil
}
