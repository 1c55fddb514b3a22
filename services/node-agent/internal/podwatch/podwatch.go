// Package podwatch watches the Mountpoint Pods of this node, and only those: the API server
// filters by namespace and spec.nodeName, so a node-agent never holds the pods of other nodes.
// It returns a pod only once mppodcheck.Verify accepts it as the pod the pod-reconciler builds:
// a pod of a Mountpoint Pod's name that anyone else created is refused (mppodcheck.ErrImpostor)
// before the node-agent hands it a FUSE connection or writes keys into its comm dir.
package podwatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/s3csi/s3csi/shared/mppod/mppodcheck"
)

// ErrPodFinished is returned when a Mountpoint Pod ended before it ran: it will not serve.
var ErrPodFinished = errors.New("mountpoint pod has finished")

// ErrCannotStart is returned when kubelet reports that a Mountpoint Pod's container cannot
// start (its image cannot be had, its configuration is refused): waiting on gains nothing until
// someone acts, so the caller says why at once.
var ErrCannotStart = errors.New("mountpoint pod cannot start")

// startFailures are the reasons kubelet gives for a waiting container that will not start
// without someone acting; ContainerCreating and PodInitializing are not among them.
var startFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// pullFailures are the reasons of startFailures that say the image could not be pulled.
var pullFailures = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true}

// cannotStart returns an error wrapping ErrCannotStart, with kubelet's reason and message, when
// a container of pod waits for a reason in startFailures. A pull failure also names the Secrets
// the pod pulls with, or says it has none: kubelet's message names only the image, and a wrong or
// missing credential is the usual cause.
func cannotStart(pod *corev1.Pod) error {
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		w := cs.State.Waiting
		if w == nil || !startFailures[w.Reason] {
			continue
		}
		err := fmt.Errorf("%w: container %s: %s: %s", ErrCannotStart, cs.Name, w.Reason, w.Message)
		if pullFailures[w.Reason] {
			var names []string
			for _, s := range pod.Spec.ImagePullSecrets {
				names = append(names, s.Name)
			}
			if len(names) == 0 {
				return fmt.Errorf("%w (the pod pulls with no Secret: the chart's imagePullSecrets or mountpointPod.imagePullSecrets give it some)", err)
			}
			return fmt.Errorf("%w (the pod pulls with the Secrets %s of namespace %s: check they exist there and hold this registry's credentials)",
				err, strings.Join(names, ", "), pod.Namespace)
		}
		return err
	}
	return nil
}

// Watcher holds this node's Mountpoint Pods and wakes those waiting for one to run.
type Watcher struct {
	namespace, node string
	cache           cache.Cache
	// live reads the API server directly every fallback while a publish waits (WaitRunning).
	live     client.Reader
	fallback time.Duration
	// expect is what a Mountpoint Pod of this node must be (mppodcheck.Verify).
	expect mppodcheck.Expected

	mu        sync.Mutex
	waiters   map[string]map[chan struct{}]struct{}
	observers []func(*corev1.Pod)
}

// New returns a Watcher of the pods in namespace scheduled to node. Start runs it. While a
// publish waits for a pod to run, live (when not nil) is read every fallback besides the watch.
// mounterImage is the image the pod-reconciler gives Mountpoint Pods; a pod of another
// repository is refused (empty: the image is not checked).
func New(cfg *rest.Config, scheme *runtime.Scheme, namespace, node, mounterImage string, live client.Reader, fallback time.Duration) (*Watcher, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme: scheme,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {
				Namespaces: map[string]cache.Config{namespace: {}},
				Field:      fields.OneTermEqualSelector("spec.nodeName", node),
			},
		},
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return nil, fmt.Errorf("create mountpoint pod cache: %w", err)
	}
	return &Watcher{namespace: namespace, node: node, cache: c, live: live, fallback: fallback,
		expect:  mppodcheck.Expected{Namespace: namespace, NodeName: node, Image: mounterImage},
		waiters: map[string]map[chan struct{}]struct{}{}}, nil
}

// Start runs the watch until ctx ends; the informer exists before the cache starts, so no
// event is missed.
func (w *Watcher) Start(ctx context.Context) error {
	inf, err := w.cache.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("get mountpoint pod informer: %w", err)
	}
	wake := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			w.notify(p.Name)
			w.observe(p)
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, obj any) { wake(obj) },
		DeleteFunc: wake,
	})
	if err != nil {
		return fmt.Errorf("watch mountpoint pods: %w", err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()
	if err := w.cache.Start(ctx); err != nil {
		return fmt.Errorf("run mountpoint pod cache: %w", err)
	}
	return nil
}

// WaitForCacheSync blocks until the watch has listed the pods once, or ctx ends.
func (w *Watcher) WaitForCacheSync(ctx context.Context) bool {
	return w.cache.WaitForCacheSync(ctx)
}

func (w *Watcher) notify(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waiters[name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Observe registers fn to be called with every Mountpoint Pod the watch adds, updates or
// deletes (its last state); fn runs on the watch's goroutine and must not block.
func (w *Watcher) Observe(fn func(*corev1.Pod)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.observers = append(w.observers, fn)
}

func (w *Watcher) observe(p *corev1.Pod) {
	w.mu.Lock()
	observers := w.observers
	w.mu.Unlock()
	for _, fn := range observers {
		fn(p)
	}
}

// Get returns the named Mountpoint Pod, or nil when this node has none of that name; a pod of
// that name that is not the pod the pod-reconciler builds fails with an error wrapping
// mppodcheck.ErrImpostor.
func (w *Watcher) Get(ctx context.Context, name string) (*corev1.Pod, error) {
	pod, err := w.get(ctx, name)
	if err != nil || pod == nil {
		return nil, err
	}
	if err := w.verify(pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// get is Get without the check.
func (w *Watcher) get(ctx context.Context, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := w.cache.Get(ctx, client.ObjectKey{Namespace: w.namespace, Name: name}, &pod)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get mountpoint pod %s: %w", name, err)
	}
	return &pod, nil
}

// verify refuses a pod that is not the Mountpoint Pod the pod-reconciler builds, saying what to
// do about it.
func (w *Watcher) verify(pod *corev1.Pod) error {
	if err := mppodcheck.Verify(pod, w.expect); err != nil {
		return fmt.Errorf("pod %s/%s (uid %s) was not created by the s3csi pod-reconciler, and gets no mount and no key: %w; "+
			"delete it (kubectl delete pod -n %s %s) and find who created it: the pod-reconciler then creates the Mountpoint Pod",
			w.namespace, pod.Name, pod.UID, err, w.namespace, pod.Name)
	}
	return nil
}

// List returns this node's Mountpoint Pods.
func (w *Watcher) List(ctx context.Context) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := w.cache.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list mountpoint pods: %w", err)
	}
	return list.Items, nil
}

// WaitRunning returns the named pod once it is Running, woken by the watch, and reads the API
// server directly every fallback while it waits.
// A pod that does not exist yet is waited for; one that ended fails with ErrPodFinished, one
// whose container kubelet cannot start with ErrCannotStart. The watch holds only the pods
// scheduled to this node: one the scheduler has not placed yet is waited for as not there.
//
// Problem: after the API server was away (a restart, a network cut), the watch comes back only
// when its reflector's back-off, which grows to a minute, lets it; a publish waiting on the watch
// waited that long for a pod that was Running all the while (measured: over 60 s in the wait_pod
// phase after an 8 s restart).
// Solution: while a publish waits, a direct read every fallback (the attachment waiter's period)
// stands in for a watch that is late; a failed read leaves the wait to the watch.
// Invariant: a pod Running on the API server is seen within fallback plus one read, whatever
// the watch's state; nothing is read directly while no publish waits.
func (w *Watcher) WaitRunning(ctx context.Context, name string) (*corev1.Pod, error) {
	return w.wait(ctx, name, w.running)
}

// WaitServing returns the named pod once it is Running, not terminating and not the pod of UID
// except: the pod that serves the name's mount next. A pod that is terminating or finished is
// waited past (the pod-reconciler replaces it under the same name while workloads use it), and so
// is a container kubelet cannot start yet (someone may fix its image while the mount waits).
//
// A pod mppodcheck.Verify refuses is waited past too (someone may delete it, and the
// pod-reconciler then creates the real one); when ctx ends first the error says why.
func (w *Watcher) WaitServing(ctx context.Context, name string, except types.UID) (*corev1.Pod, error) {
	var impostor error
	pod, err := w.wait(ctx, name, func(pod *corev1.Pod) (*corev1.Pod, error) {
		if pod == nil || pod.UID == except || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			return nil, nil
		}
		if impostor = w.verify(pod); impostor != nil {
			return nil, nil
		}
		return pod, nil
	})
	if err != nil && impostor != nil {
		return nil, fmt.Errorf("%w (%w)", err, impostor)
	}
	return pod, err
}

// wait returns the named pod once ready returns it, or ready's error (see WaitRunning).
func (w *Watcher) wait(ctx context.Context, name string, ready func(*corev1.Pod) (*corev1.Pod, error)) (*corev1.Pod, error) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.waiters[name] == nil {
		w.waiters[name] = map[chan struct{}]struct{}{}
	}
	w.waiters[name][ch] = struct{}{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.waiters[name], ch)
		if len(w.waiters[name]) == 0 {
			delete(w.waiters, name)
		}
		w.mu.Unlock()
	}()
	var tick <-chan time.Time
	if w.live != nil && w.fallback > 0 {
		t := time.NewTicker(w.fallback)
		defer t.Stop()
		tick = t.C
	}
	pod, err := w.get(ctx, name)
	for {
		if err != nil {
			return nil, err
		}
		if running, err := ready(pod); running != nil || err != nil {
			return running, err
		}
		select {
		case <-ctx.Done():
			phase := "not scheduled to this node yet: if the scheduler cannot place it, the workload's events say why"
			if pod != nil {
				phase = string(pod.Status.Phase)
			}
			return nil, fmt.Errorf("wait for mountpoint pod %s/%s to run (%s): %w", w.namespace, name, phase, ctx.Err())
		case <-ch:
			pod, err = w.get(ctx, name)
		case <-tick:
			if live, lerr := w.getLive(ctx, name); lerr == nil {
				pod = live
			}
		}
	}
}

// running returns pod when it is Running, an error when it will not run, and neither while it
// may still run (or does not exist).
func (w *Watcher) running(pod *corev1.Pod) (*corev1.Pod, error) {
	if pod == nil {
		return nil, nil
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		if err := w.verify(pod); err != nil {
			return nil, err
		}
		return pod, nil
	case corev1.PodSucceeded, corev1.PodFailed:
		return nil, fmt.Errorf("mountpoint pod %s/%s is %s: %w", w.namespace, pod.Name, pod.Status.Phase, ErrPodFinished)
	case corev1.PodPending:
		if err := cannotStart(pod); err != nil {
			return nil, fmt.Errorf("mountpoint pod %s/%s %w", w.namespace, pod.Name, err)
		}
	}
	return nil, nil
}

// getLive reads the named pod from the API server; like Get, a pod not scheduled to this node
// is none.
func (w *Watcher) getLive(ctx context.Context, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := w.live.Get(ctx, client.ObjectKey{Namespace: w.namespace, Name: name}, &pod)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get mountpoint pod %s: %w", name, err)
	}
	if pod.Spec.NodeName != w.node {
		return nil, nil
	}
	return &pod, nil
}
