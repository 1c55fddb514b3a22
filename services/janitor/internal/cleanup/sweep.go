package cleanup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// sweepParallelism bounds the checks a sweep runs at once: enough to hide API latency, few
// enough not to crowd out the API server's other clients.
const sweepParallelism = 4

// SweepResult counts what one sweep looked at.
type SweepResult struct {
	// Attachments and MountpointPods are how many objects the caches held.
	Attachments, MountpointPods int
	// Nodes and OrphanCandidates are how many targeted checks the sweep ran.
	Nodes, OrphanCandidates int
}

// Sweep checks every attachment and Mountpoint Pod once: the caches name the suspects (a
// workload pod the cache does not know, an empty attachment, a missing Node, an unreferenced
// Mountpoint Pod), and a targeted check confirms each against the API server. A clean cluster
// costs no API request. Errors of single checks do not stop the sweep; they are returned joined.
func (j *Janitor) Sweep(ctx context.Context) (SweepResult, error) {
	start := time.Now()
	res, err := j.sweep(ctx)
	j.metrics.SweepDuration.Observe(time.Since(start).Seconds())
	result := "success"
	if err != nil {
		result = "error"
		j.metrics.Errors.WithLabelValues("sweep").Inc()
	}
	j.metrics.Sweeps.WithLabelValues(result).Inc()
	j.log.V(1).Info("Swept", "attachments", res.Attachments, "mountpointPods", res.MountpointPods,
		"checkedNodes", res.Nodes, "checkedMountpointPods", res.OrphanCandidates, "duration", time.Since(start), "failed", err != nil)
	return res, err
}

func (j *Janitor) sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	nodes, referenced, err := j.suspectNodes(ctx, &res)
	if err != nil {
		return res, err
	}
	pods := newPodMetaList()
	if err := j.cache.List(ctx, pods, client.InNamespace(j.cfg.MountpointNamespace), readOnly); err != nil {
		return res, fmt.Errorf("list Mountpoint Pods from cache: %w", err)
	}
	var orphans []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if !isMountpointPod(p.Labels) {
			continue
		}
		res.MountpointPods++
		if !referenced.Has(p.Name) && p.DeletionTimestamp == nil && j.stale(p.CreationTimestamp.Time) {
			orphans = append(orphans, p.Name)
		}
	}
	res.Nodes, res.OrphanCandidates = nodes.Len(), len(orphans)

	var (
		g    errgroup.Group
		errs = make([]error, nodes.Len()+len(orphans))
		n    int
	)
	g.SetLimit(sweepParallelism)
	for _, node := range sets.List(nodes) {
		i := n
		n++
		g.Go(func() error { errs[i] = j.CheckNode(ctx, node); return nil })
	}
	// Node checks first: they ask the Mountpoint Pods they leave without workloads to unmount,
	// which the orphan checks would otherwise do a step behind.
	_ = g.Wait()
	slices.Sort(orphans)
	for _, name := range orphans {
		i := n
		n++
		g.Go(func() error { errs[i] = j.CheckMountpointPod(ctx, name); return nil })
	}
	_ = g.Wait()
	return res, errors.Join(errs...)
}

// suspectNodes scans the cached attachments: the nodes whose attachments may hold something to
// remove, and every Mountpoint Pod name an attachment references.
func (j *Janitor) suspectNodes(ctx context.Context, res *SweepResult) (sets.Set[string], sets.Set[string], error) {
	var list s3csiv2.MountpointS3PodAttachmentList
	if err := j.cache.List(ctx, &list, readOnly); err != nil {
		return nil, nil, fmt.Errorf("list attachments from cache: %w", err)
	}
	res.Attachments = len(list.Items)
	nodes, referenced := sets.New[string](), sets.New[string]()
	present := map[string]bool{}
	for i := range list.Items {
		s3pa := &list.Items[i]
		for mp := range s3pa.Spec.MountpointS3PodAttachments {
			referenced.Insert(mp)
		}
		node := s3pa.Spec.NodeName
		if nodes.Has(node) {
			continue
		}
		ok, known := present[node]
		if !known {
			cached, err := j.nodeCached(ctx, node)
			if err != nil {
				return nil, nil, err
			}
			ok, present[node] = cached, cached
		}
		suspect, err := j.suspect(ctx, s3pa)
		if err != nil {
			return nil, nil, err
		}
		if !ok || suspect || j.nodeQuarantined(node) {
			nodes.Insert(node)
		}
	}
	return nodes, referenced, nil
}

// suspect reports whether the cache suggests that an attachment holds something to remove.
func (j *Janitor) suspect(ctx context.Context, s3pa *s3csiv2.MountpointS3PodAttachment) (bool, error) {
	if emptyEntries(s3pa) && j.stale(s3pa.CreationTimestamp.Time) {
		return true, nil
	}
	for _, ws := range s3pa.Spec.MountpointS3PodAttachments {
		for _, w := range ws {
			if !j.stale(w.AttachmentTime.Time) {
				continue
			}
			exists, err := j.podExists(ctx, w.WorkloadPodUID)
			if err != nil || !exists {
				return err == nil, err
			}
		}
	}
	return false, nil
}
