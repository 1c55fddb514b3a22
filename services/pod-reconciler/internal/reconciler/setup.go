package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/keymutex"

	"github.com/s3csi/s3csi/services/pod-reconciler/internal/metrics"
)

// Setup registers the cache indexes, the three controllers and the periodic resync with mgr,
// which must have been created with CacheOptions. Everything it adds needs leader election.
// pub receives the events (nil disables them). The returned Watchdog feeds the liveness check.
func Setup(ctx context.Context, mgr manager.Manager, cfg Config, pub Publisher, m *metrics.Metrics) (*Watchdog, error) {
	cfg = cfg.withDefaults()
	if pub == nil {
		pub = nopPublisher{}
	}
	if err := addIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("set up pod-reconciler: %w", err)
	}
	st := &state{
		cfg: cfg, client: mgr.GetClient(), live: mgr.GetAPIReader(), pub: pub, m: m,
		recorder: mgr.GetEventRecorderFor(recorderName),
		s3pas:    newRecentWrites[*s3csiv2.MountpointS3PodAttachment](cfg.RecentWriteTTL),
		mpPods:   newRecentWrites[*corev1.Pod](cfg.RecentWriteTTL),
		locks:    &keymutex.Mutex{},
	}
	wd := newWatchdog()
	resync := newResyncer(cfg.ResyncPeriod, mgr.GetClient(), st)
	opts := controller.Options{
		MaxConcurrentReconciles: cfg.MaxConcurrentReconciles,
		SkipNameValidation:      ptr.To(cfg.SkipNameValidation),
		NewQueue:                wd.newQueue,
	}
	wrap := func(name string, r reconcile.Reconciler) reconcile.Reconciler {
		return &instrumented{name: name, inner: r, m: m, w: wd}
	}
	enqueue := &handler.EnqueueRequestForObject{}

	err := builder.ControllerManagedBy(mgr).Named("workload").
		For(&corev1.Pod{}, builder.WithPredicates(podPredicate(st.isWorkloadCandidate))).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(st.podsOfClaim)).
		Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(st.podsOfVolume)).
		WatchesRawSource(source.Channel(resync.workloads, enqueue)).
		WithOptions(opts).
		Complete(wrap("workload", &workloadReconciler{st}))
	if err != nil {
		return nil, fmt.Errorf("set up workload controller: %w", err)
	}
	err = builder.ControllerManagedBy(mgr).Named("attachment").
		For(&s3csiv2.MountpointS3PodAttachment{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(st.attachmentsOfWorkload),
			builder.WithPredicates(workloadGone(cfg.MountpointNamespace))).
		WatchesRawSource(source.Channel(resync.attachments, enqueue)).
		WithOptions(opts).
		Complete(wrap("attachment", &attachmentReconciler{st}))
	if err != nil {
		return nil, fmt.Errorf("set up attachment controller: %w", err)
	}
	isMountpoint := func(p *corev1.Pod) bool { return isOurMountpointPod(p, cfg.MountpointNamespace) }
	err = builder.ControllerManagedBy(mgr).Named("mountpoint").
		For(&corev1.Pod{}, builder.WithPredicates(podPredicate(isMountpoint))).
		WatchesRawSource(source.Channel(resync.mountpoints, enqueue)).
		WithOptions(opts).
		Complete(wrap("mountpoint", &mountpointReconciler{st}))
	if err != nil {
		return nil, fmt.Errorf("set up mountpoint controller: %w", err)
	}
	if err := mgr.Add(resync); err != nil {
		return nil, fmt.Errorf("add resync: %w", err)
	}
	return wd, nil
}

func podPredicate(keep func(*corev1.Pod) bool) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		pod, ok := o.(*corev1.Pod)
		return ok && keep(pod)
	})
}

// workloadGone passes the pod events after which a workload may have to leave its S3PA: it
// ended, is terminating, or was deleted.
func workloadGone(mountpointNamespace string) predicate.Predicate {
	gone := func(o client.Object) bool {
		pod, ok := o.(*corev1.Pod)
		return ok && pod.Namespace != mountpointNamespace && (podEnded(pod) || pod.DeletionTimestamp != nil)
	}
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return gone(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { _, ok := e.Object.(*corev1.Pod); return ok },
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}

// attachmentsOfWorkload maps a workload pod to the S3PAs that record it.
func (s *state) attachmentsOfWorkload(ctx context.Context, o client.Object) []reconcile.Request {
	list := &s3csiv2.MountpointS3PodAttachmentList{}
	if err := s.client.List(ctx, list, client.MatchingFields{indexWorkloadUIDs: string(o.GetUID())}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// podsOfClaim maps a claim to the scheduled pods that mount it, so a claim bound late wakes them.
func (s *state) podsOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	return s.podsMounting(ctx, o.GetNamespace(), o.GetName())
}

// podsOfVolume maps a PV to the pods that mount the claim it is bound to.
func (s *state) podsOfVolume(ctx context.Context, o client.Object) []reconcile.Request {
	pv, ok := o.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil {
		return nil
	}
	return s.podsMounting(ctx, pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name)
}

func (s *state) podsMounting(ctx context.Context, namespace, claim string) []reconcile.Request {
	list := &corev1.PodList{}
	if err := s.client.List(ctx, list, client.MatchingFields{indexPodClaims: namespace + "/" + claim}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if s.isWorkloadCandidate(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}
