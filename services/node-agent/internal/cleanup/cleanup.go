// Package cleanup unmounts the source mounts of Mountpoint Pods that serve no workload any
// more: those annotated needs-unmount, those being deleted (Terminating) and those whose pod
// is gone.
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/s3csi/s3csi/shared/commdir"
	"github.com/s3csi/s3csi/shared/keymutex"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/node-agent/internal/source"
)

// DefaultPeriod is the period of the fallback sweep.
const DefaultPeriod = time.Minute

// Outcomes of one cleanup.
const (
	OutcomeKept      = "kept"
	OutcomeWaiting   = "waiting"
	OutcomeUnmounted = "unmounted"
	OutcomeFailed    = "failed"
)

// PodReader reads this node's Mountpoint Pods.
type PodReader interface {
	// Get returns the named pod, nil when it does not exist.
	Get(ctx context.Context, name string) (*corev1.Pod, error)
}

// Recorder counts cleanups.
type Recorder interface{ Cleanup(outcome string) }

// Cleaner is a runnable: it cleans the source of a Mountpoint Pod when triggered (the
// needs-unmount event) and sweeps every source periodically as the fallback.
//
// Problem: unmounting a source that a workload still binds would break it; deleting a dir
// through a live FUSE mount would delete the user's objects; and a slow unmount is not a
// reason to force one.
// Solution: under the Mountpoint Pod's lock (shared with NodePublishVolume): write mount.exit,
// leave the source alone while any bind of it remains, unmount, re-read the mount table, and
// only then rmdir the (empty) dir. Nothing is stat-ed through a mount (a stopped FUSE server
// would hold the lock and the sweep forever): the mount table decides. Nothing is unmounted
// lazily, except a source that a probe of this process found not answering and is still
// blocked in (mount.Stuck): that probe keeps it busy until the server answers, which a stopped
// server never does, and with no bind left nothing else reaches it.
// Invariant: a source is unmounted only when its pod is gone, Terminating or marked
// needs-unmount, and no bind of it remains; a dir is removed only when it is no mount point.
type Cleaner struct {
	kubeletDir string
	pods       PodReader
	locks      *keymutex.Mutex
	period     time.Duration
	rec        Recorder
	trigger    chan string
	// recheck wakes Start to look again at the sources left waiting for their last bind.
	recheck chan struct{}

	mu      sync.Mutex
	waiting map[string]struct{}
}

// New returns a Cleaner; period <= 0 means DefaultPeriod, rec may be nil.
func New(kubeletDir string, pods PodReader, locks *keymutex.Mutex, period time.Duration, rec Recorder) *Cleaner {
	if period <= 0 {
		period = DefaultPeriod
	}
	return &Cleaner{
		kubeletDir: kubeletDir, pods: pods, locks: locks, period: period, rec: rec,
		trigger: make(chan string, 64), recheck: make(chan struct{}, 1), waiting: map[string]struct{}{},
	}
}

// Releasing reports whether a Mountpoint Pod's source is to be unmounted once no workload binds
// it: the pod-reconciler marked it needs-unmount, or it is being deleted (a drain, an
// eviction, an operator). A Terminating Mountpoint Pod gets no new workload; its mounter keeps
// serving the binds it has through the pod's grace period, and exits once this cleanup
// unmounts the source.
func Releasing(pod *corev1.Pod) bool {
	return pod.Annotations[mppod.AnnotationNeedsUnmount] != "" || pod.DeletionTimestamp != nil
}

// Observe triggers a cleanup of a Mountpoint Pod the pod watch saw releasing (Releasing), so
// that its source is unmounted without waiting for the needs-unmount event or the sweep.
func (c *Cleaner) Observe(pod *corev1.Pod) {
	if Releasing(pod) {
		c.Trigger(pod.Name)
	}
}

// Trigger asks for the named Mountpoint Pod's source to be looked at now. It never blocks:
// when the queue is full the next sweep covers it.
func (c *Cleaner) Trigger(mountpointPod string) {
	select {
	case c.trigger <- mountpointPod:
	default:
	}
}

// Unbound tells the cleaner that a bind was removed (NodeUnpublishVolume). It never blocks.
//
// Problem: the reconciler asks for the unmount as soon as the last workload is deleted, before
// kubelet has unpublished its target, so the triggered clean finds the source still bound and
// waits; without another trigger the source would stay until the next sweep (a minute).
// Solution: the cleaner remembers the sources it left waiting and looks at them again after
// every unbind.
func (c *Cleaner) Unbound() {
	select {
	case c.recheck <- struct{}{}:
	default:
	}
}

// Start sweeps once, then on every trigger, unbind and period, until ctx ends.
func (c *Cleaner) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("cleanup")
	ctx = logr.NewContext(ctx, log)
	c.Sweep(ctx)
	ticker := time.NewTicker(c.period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case name := <-c.trigger:
			if _, err := c.Clean(ctx, name); err != nil {
				log.Error(err, "Cleaning a source failed; retrying at the next sweep", "mountpointPod", name)
			}
		case <-c.recheck:
			for _, name := range c.waitingNames() {
				if _, err := c.Clean(ctx, name); err != nil {
					log.Error(err, "Cleaning a source failed; retrying at the next sweep", "mountpointPod", name)
				}
			}
		case <-ticker.C:
			c.Sweep(ctx)
		}
	}
}

// Sweep cleans every source dir that no longer serves.
func (c *Cleaner) Sweep(ctx context.Context) {
	log := logr.FromContextOrDiscard(ctx)
	names, err := mppod.SourceNames(c.kubeletDir)
	if err != nil {
		log.Error(err, "Sweeping sources failed")
		return
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		if _, err := c.Clean(ctx, name); err != nil {
			log.Error(err, "Cleaning a source failed; retrying at the next sweep", "mountpointPod", name)
		}
	}
}

// Clean unmounts and removes the named Mountpoint Pod's source when its pod is gone or
// releasing (Releasing) and nothing binds it; it returns what it did.
func (c *Cleaner) Clean(ctx context.Context, name string) (string, error) {
	outcome, err := c.clean(ctx, name)
	if err != nil {
		outcome = OutcomeFailed
	}
	c.mu.Lock()
	if outcome == OutcomeWaiting {
		c.waiting[name] = struct{}{}
	} else {
		delete(c.waiting, name)
	}
	c.mu.Unlock()
	if c.rec != nil && outcome != OutcomeKept {
		c.rec.Cleanup(outcome)
	}
	return outcome, err
}

func (c *Cleaner) waitingNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.waiting))
	for name := range c.waiting {
		names = append(names, name)
	}
	return names
}

func (c *Cleaner) clean(ctx context.Context, name string) (string, error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("mountpointPod", name)
	// The name may come from an event: nothing is read or touched for a name that is not a
	// Mountpoint Pod's, and the source dir is checked to stay under the driver's mnt dir.
	dir, err := mppod.SourceDir(c.kubeletDir, name)
	if err != nil {
		return "", err
	}
	unlock := c.locks.Lock(name)
	defer unlock()
	pod, err := c.pods.Get(ctx, name)
	if err != nil {
		return "", err
	}
	if pod != nil && !Releasing(pod) {
		return OutcomeKept, nil
	}
	if pod != nil {
		commDir, err := source.CommDir(c.kubeletDir, string(pod.UID))
		if err != nil {
			return "", err
		}
		if err := requestExit(commDir); err != nil {
			return "", err
		}
	}
	table, err := mount.ReadTable()
	if err != nil {
		return "", err
	}
	if _, mounted := table.Lookup(dir); mounted {
		if binds := table.Binds(dir); len(binds) > 0 {
			log.V(1).Info("Source still bound by workloads; waiting", "binds", len(binds))
			return OutcomeWaiting, nil
		}
		remove := mount.Unmount
		if mount.Stuck(dir) {
			log.Info("The source's filesystem does not answer; detaching it", "source", dir)
			remove = mount.Detach
		}
		if err := remove(dir); err != nil {
			return "", fmt.Errorf("unmount source of %s: %w", name, err)
		}
	}
	if err := mount.RemoveDir(dir); err != nil {
		return "", fmt.Errorf("remove source dir of %s: %w", name, err)
	}
	log.Info("Cleaned the source of a Mountpoint Pod that serves no workload", "podGone", pod == nil,
		"terminating", pod != nil && pod.DeletionTimestamp != nil)
	return OutcomeUnmounted, nil
}

// requestExit writes mount.exit so the mounter exits 0 once its filesystem is unmounted. A
// missing comm dir means the pod's volumes are gone already. A symlink the pod planted at
// mount.exit is replaced, never followed.
func requestExit(commDir string) error {
	dir, err := commdir.Open(commDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", mppod.MountExitName, err)
	}
	defer func() { _ = dir.Close() }()
	if err := dir.WriteFile(mppod.MountExitName, nil, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", mppod.MountExitName, err)
	}
	return nil
}
