//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// namespace creates a namespace for one test and deletes it, and waits for it to go, at the end.
func namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := k8s.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns.Name, err)
			return
		}
		eventually(ctx, t, "namespace "+ns.Name+" deleted", func() error {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%w)", err)
		})
	})
	return ns.Name
}

// busybox is a pod running sh -c script in the test image, with the given volumes mounted at
// /<volume name>.
func busybox(ns, name, script string, volumes ...corev1.Volume) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "s3csi/busybox:1.35", ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script},
			}},
			Volumes: volumes,
		},
	}
	for _, v := range volumes {
		pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts,
			corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
	}
	return pod
}

func claimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}}
}

// waitPodDone waits for the pod to succeed and returns its log; a failed pod fails the test with
// its log and events.
func waitPodDone(ctx context.Context, t testing.TB, pod *corev1.Pod) string {
	t.Helper()
	eventually(ctx, t, "pod "+pod.Name+" finished", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		switch pod.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			t.Fatalf("pod %s failed:\n%s\nevents:\n%s", pod.Name, podLog(ctx, t, pod), podEvents(ctx, pod))
		}
		return fmt.Errorf("phase %s; events: %s", pod.Status.Phase, podEvents(ctx, pod))
	})
	return podLog(ctx, t, pod)
}

func podLog(ctx context.Context, t testing.TB, pod *corev1.Pod) string {
	t.Helper()
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig())
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	cs, err := kubernetes.NewForConfig(rest)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	rc, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).Stream(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", pod.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("logs of %s: %v", pod.Name, err)
	}
	return string(b)
}

func podEvents(ctx context.Context, pod *corev1.Pod) string {
	var list corev1.EventList
	if err := k8s.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		if e.InvolvedObject.Name == pod.Name {
			fmt.Fprintf(&b, "%s %s: %s; ", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

// eventually polls check every 250 ms until it returns nil or ctx ends, then fails with the
// last error.
func eventually(ctx context.Context, t testing.TB, what string, check func() error) {
	t.Helper()
	var err error
	for {
		if err = check(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within the deadline: %v", what, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// mountsUnder lists the host's mounts below dir (the test runs on the node, as root), with their
// filesystem type.
func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("read mount table: %v", err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4]+" ("+fields[sep+1]+")")
		}
	}
	return out
}

// getPod refreshes pod from the API server.
func getPod(ctx context.Context, pod *corev1.Pod) error {
	return k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)
}
