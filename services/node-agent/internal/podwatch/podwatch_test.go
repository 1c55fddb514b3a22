package podwatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/mppod/mppodcheck"
	"github.com/s3csi/s3csi/shared/testenv"
)

// A watch that has not caught up (its reflector backs off after the API server was away) must
// not hold a publish: while WaitRunning waits, the direct read finds the Running pod. The watch
// here is real but empty; the direct reader holds what the API server would answer.
func TestWaitRunningReadsTheAPIServerWhenTheWatchIsLate(t *testing.T) {
	api := testenv.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	running := fixture.MountpointPod(mppod.Name("uid-running", "pv"), "node-a")
	running.Status.Phase = corev1.PodRunning
	elsewhere := fixture.MountpointPod(mppod.Name("uid-elsewhere", "pv"), "node-b")
	elsewhere.Status.Phase = corev1.PodRunning
	live := fake.NewClientBuilder().WithScheme(api.Scheme).WithObjects(running, elsewhere).WithStatusSubresource(running, elsewhere).Build()

	w, err := New(api.Config, api.Scheme, "mount-s3", "node-a", fixture.MounterImage, live, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.Start(ctx) }()
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("the watch did not sync")
	}
	start := time.Now()
	got, err := w.WaitRunning(ctx, running.Name)
	if err != nil || got == nil || got.Name != running.Name {
		t.Fatalf("WaitRunning = %v, %v; want the Running pod the API server holds", got, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("found after %s, want about one fallback period", took)
	}

	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := w.WaitRunning(short, elsewhere.Name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitRunning of a pod of another node = %v, want it waited for as not there", err)
	}
}

// A pod of a Mountpoint Pod's name that the pod-reconciler did not build (another image, an
// extra container, a host path, no labels) is never returned: WaitRunning and Get refuse it,
// naming what differs and what to do, and WaitServing waits past it until the genuine pod serves.
func TestAnImpostorMountpointPodIsNeverReturned(t *testing.T) {
	api := testenv.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := api.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mppod.DefaultNamespace}}); err != nil {
		t.Fatal(err)
	}
	w, err := New(api.Config, api.Scheme, mppod.DefaultNamespace, "node-a", fixture.MounterImage, api.Client, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.Start(ctx) }()
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("the watch did not sync")
	}
	hostPath := func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host",
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
	}
	for i, tc := range []struct {
		name string
		mod  fixture.PodMod
		want string
	}{
		{"another image", fixture.WithImage("evil.example/steal-keys:1"), "evil.example/steal-keys:1"},
		{"an extra container", fixture.WithContainer("sidecar", "evil.example/sidecar:1"), "2 containers"},
		{"a host path", hostPath, "hostPath /"},
		{"no labels", fixture.WithoutLabels(), "label app.kubernetes.io/managed-by"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := mppod.Name(fmt.Sprintf("uid-%d", i), "pv")
			pod := fixture.MountpointPod(name, "node-a", tc.mod)
			if err := api.Client.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			pod.Status.Phase = corev1.PodRunning
			if err := api.Client.Status().Update(ctx, pod); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "the watch to see the pod Running", func() bool {
				p, _ := w.get(ctx, name)
				return p != nil && p.Status.Phase == corev1.PodRunning
			})
			_, err := w.WaitRunning(ctx, name)
			for _, want := range []string{tc.want, "was not created by the s3csi pod-reconciler", "kubectl delete pod -n mount-s3 " + name} {
				if !errors.Is(err, mppodcheck.ErrImpostor) || !strings.Contains(err.Error(), want) {
					t.Fatalf("WaitRunning of an impostor: %v; want ErrImpostor saying %q", err, want)
				}
			}
			if got, err := w.Get(ctx, name); got != nil || !errors.Is(err, mppodcheck.ErrImpostor) {
				t.Fatalf("Get of an impostor: %v, %v; want ErrImpostor", got, err)
			}
			short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancelShort()
			if got, err := w.WaitServing(short, name, ""); got != nil || !errors.Is(err, mppodcheck.ErrImpostor) {
				t.Fatalf("WaitServing past an impostor: %v, %v; want the wait to end saying why", got, err)
			}
		})
	}

	name := mppod.Name("uid-genuine", "pv")
	genuine := fixture.MountpointPod(name, "node-a")
	if err := api.Client.Create(ctx, genuine); err != nil {
		t.Fatal(err)
	}
	genuine.Status.Phase = corev1.PodRunning
	if err := api.Client.Status().Update(ctx, genuine); err != nil {
		t.Fatal(err)
	}
	if got, err := w.WaitServing(ctx, name, ""); err != nil || got == nil || got.UID != genuine.UID {
		t.Fatalf("WaitServing of the pod the pod-reconciler builds: %v, %v", got, err)
	}
}

// A Mountpoint Pod whose container cannot start is reported at once with kubelet's reason; a pull
// failure also names the Secrets the pod pulls with, since kubelet's message names only the image.
func TestCannotStartSaysWhyAndNamesThePullSecrets(t *testing.T) {
	waiting := func(reason, msg string, secrets ...string) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mount-s3", Name: "mp-1"}}
		for _, s := range secrets {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
		}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "mounter", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg},
		}}}
		return pod
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want []string // nil: no error
	}{
		{"a container being created is no failure", waiting("ContainerCreating", ""), nil},
		{"a refused pull names the pull Secrets", waiting("ErrImagePull", "401 Unauthorized", "regcred", "mirror"),
			[]string{"ErrImagePull: 401 Unauthorized", "the Secrets regcred, mirror of namespace mount-s3"}},
		{"a pull backing off without a Secret says so", waiting("ImagePullBackOff", "Back-off pulling image"),
			[]string{"ImagePullBackOff", "pulls with no Secret", "mountpointPod.imagePullSecrets"}},
		{"a refused configuration names no Secret", waiting("CreateContainerConfigError", "bad", "regcred"),
			[]string{"CreateContainerConfigError: bad"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cannotStart(tc.pod)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("cannotStart = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrCannotStart) {
				t.Fatalf("cannotStart = %v, want ErrCannotStart", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("cannotStart = %q, want it to contain %q", err, w)
				}
			}
			if tc.pod.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError" && strings.Contains(err.Error(), "regcred") {
				t.Errorf("cannotStart = %q names pull Secrets for a failure that is no pull", err)
			}
		})
	}
}
