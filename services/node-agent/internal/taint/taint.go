// Package taint removes the node's startup taint once kubelet lists the driver in the node's
// CSINode, so that no workload using the driver is scheduled to a node that cannot mount it.
package taint

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Key is the startup taint the administrator puts on new nodes.
const Key = "s3.csi.scality.com/agent-not-ready"

// Backoff of the check loop.
const (
	firstPause = 500 * time.Millisecond
	maxPause   = 10 * time.Second
)

// Remover is a runnable that removes the taint once and then returns.
type Remover struct {
	c      client.Client
	node   string
	driver string
}

// New returns a Remover for node and driver.
func New(c client.Client, node, driver string) *Remover {
	return &Remover{c: c, node: node, driver: driver}
}

// Start checks until the taint is gone (removed by it or absent), or ctx ends.
func (r *Remover) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("node", r.node, "taint", Key)
	pause := firstPause
	for {
		done, err := r.tryRemove(ctx)
		if done {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			log.V(1).Info("Startup taint not removed yet", "reason", err.Error(), "retryIn", pause.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, maxPause)
	}
}

// tryRemove returns true once the taint is not on the node any more.
//
// Problem: the node object changes concurrently (kubelet status, other controllers), so a
// plain remove at index i could remove another taint that moved there.
// Solution: a JSON patch that first tests the taint is at index i, then removes index i.
// Invariant: only this taint is ever removed; a failed test is retried with a fresh read.
func (r *Remover) tryRemove(ctx context.Context) (bool, error) {
	var csiNode storagev1.CSINode
	if err := r.c.Get(ctx, client.ObjectKey{Name: r.node}, &csiNode); err != nil {
		return false, fmt.Errorf("get CSINode: %w", err)
	}
	listed := false
	for _, d := range csiNode.Spec.Drivers {
		listed = listed || d.Name == r.driver
	}
	var node corev1.Node
	if err := r.c.Get(ctx, client.ObjectKey{Name: r.node}, &node); err != nil {
		return false, fmt.Errorf("get node: %w", err)
	}
	index := -1
	for i, t := range node.Spec.Taints {
		if t.Key == Key {
			index = i
			break
		}
	}
	if index < 0 {
		return true, nil
	}
	if !listed {
		return false, fmt.Errorf("driver %s is not in the node's CSINode yet", r.driver)
	}
	path := fmt.Sprintf("/spec/taints/%d", index)
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": node.Spec.Taints[index]},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return false, fmt.Errorf("build taint patch: %w", err)
	}
	if err := r.c.Patch(ctx, &node, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("patch node: %w", err)
		}
		return false, fmt.Errorf("remove startup taint: %w", err)
	}
	logr.FromContextOrDiscard(ctx).Info("Removed the startup taint: the driver is registered", "node", r.node, "taint", Key)
	return true, nil
}
