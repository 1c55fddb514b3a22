// Package source keeps custody of the sources the node-agent mounted: for each, the FUSE
// connection it holds for the mounter that replaces the serving one (handshake.Kept), and its
// own record of what it sent that mounter.
//
// Problem: a Mountpoint Pod parses data others wrote and may be compromised. Whatever root took
// back from it (the request it says it serves, the profile files in its comm dir) and sent on to
// the mounter that replaces it would carry a compromise past the pod's deletion, an image fix and
// a key rotation: the clean replacement would get the attacker's endpoint and the fresh keys.
// Solution: root records what it sent: the request and the profile files in memory, and the
// request (never a key) in a file only root reads under the plugin dir (record.go), so that a
// restarted node-agent has it. A reattach whose mounter answers another request is refused
// (handshake.ErrAnswerDiffers) and reported; profile files are always rendered by root, from the
// volume's secrets at each publish or from the driver's credentials, and never read back from a
// comm dir.
// Invariant: every byte root sends a mounter, at the first mount and at every resume, is root's.
package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/keymutex"
	"github.com/s3csi/s3csi/shared/kubenames"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

// Pods reads this node's Mountpoint Pods.
type Pods interface {
	// WaitServing returns the named Mountpoint Pod once Running, not terminating and not the
	// pod of UID except; it waits past one that is terminating or finished, for the pod that
	// replaces it.
	WaitServing(ctx context.Context, name string, except types.UID) (*corev1.Pod, error)
	// Get returns the named pod, nil when it does not exist.
	Get(ctx context.Context, name string) (*corev1.Pod, error)
}

// Config configures Sources.
type Config struct {
	// KubeletDir is the kubelet root dir as this process sees it.
	KubeletDir string
	// MounterUID is the uid Mountpoint Pods run as; a mount.sock served by another is refused.
	MounterUID int
	// DriverProfiles are the profile files of the volumes that use the driver's credentials.
	DriverProfiles credentials.Profiles
	// ResumeWait and ReplayWait are handshake.KeepOptions'.
	ResumeWait, ReplayWait time.Duration
	// Replaced, when set, is called when the mounter of a Mountpoint Pod ended and the next one
	// took its mount over.
	Replaced func(ctx context.Context, mountpointPod string, r handshake.Resumption)
}

// Sources holds the custody of every source this process keeps.
type Sources struct {
	cfg   Config
	pods  Pods
	locks *keymutex.Mutex
	mu    sync.Mutex
	kept  map[string]*custody
}

// New returns Sources; locks are the Mountpoint Pods' locks, shared with the publish and the
// cleanup of their sources.
func New(cfg Config, pods Pods, locks *keymutex.Mutex) *Sources {
	return &Sources{cfg: cfg, pods: pods, locks: locks, kept: map[string]*custody{}}
}

// Sent is what root sends the mounter of a source.
type Sent struct {
	// Request is the mount request (handshake.Request, without Resume).
	Request *handshake.Request
	// Profiles are the profile files the request names, as written into the comm dir.
	Profiles credentials.Profiles
	// DriverCredentials says that Profiles are the driver's (Config.DriverProfiles), which a
	// restarted node-agent renders again; a volume's own keys are known again only at its next
	// publish.
	DriverCredentials bool
}

// custody is root's record of one kept source.
type custody struct {
	req           *handshake.Request
	driverProfile bool
	mu            sync.Mutex
	profiles      credentials.Profiles
	known         bool
}

func (c *custody) get() (credentials.Profiles, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.profiles, c.known
}

func (c *custody) set(p credentials.Profiles) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.profiles, c.known = p, true
}

// CommDir is where the node sees a Mountpoint Pod's comm emptyDir. The UID comes from the API
// server; it fails unless it is a UUID and the result stays under the kubelet's pods dir.
func CommDir(kubeletDir, mountpointPodUID string) (string, error) {
	if err := kubenames.UID(mountpointPodUID); err != nil {
		return "", fmt.Errorf("build comm dir: %w", err)
	}
	dir, err := mppod.Beneath(filepath.Join(kubeletDir, "pods"), mountpointPodUID, "volumes", "kubernetes.io~empty-dir", mppod.CommVolumeName)
	if err != nil {
		return "", fmt.Errorf("build comm dir: %w", err)
	}
	return dir, nil
}

// Keep sends sent with dev, the FUSE connection of Mountpoint Pod mp's source, to the mounter of
// pod (handshake.Keep), and once it serves, keeps the connection and root's record of sent until
// the source is unmounted: a mounter that dies, or hands the mount over when its pod is deleted,
// is replaced under the workloads, by kubelet's restart of its container or by the Mountpoint
// Pod the pod-reconciler creates under the same name. The caller holds mp's lock.
func (s *Sources) Keep(ctx context.Context, mp string, pod *corev1.Pod, dev *os.File, sent Sent) error {
	commDir, err := CommDir(s.cfg.KubeletDir, string(pod.UID))
	if err != nil {
		return err
	}
	c := &custody{req: proto.CloneOf(sent.Request), driverProfile: sent.DriverCredentials, profiles: sent.Profiles, known: true}
	// As the exchange sends it (handshake.Keep sets the version): the record is compared with
	// what the mounter says it serves.
	c.req.Resume, c.req.Version = false, handshake.RequestVersion(c.req)
	s.open(mp, c)
	k, err := handshake.Keep(ctx, filepath.Join(commDir, mppod.MountSockName), s.cfg.MounterUID, dev, proto.CloneOf(c.req),
		s.keepOptions(ctx, mp, pod.UID, c))
	if err != nil {
		s.close(mp, c)
		return err
	}
	if err := writeRecord(s.cfg.KubeletDir, mp, record{Request: c.req, DriverCredentials: c.driverProfile}); err != nil {
		// The source serves; only a restarted node-agent will not keep it.
		logr.FromContextOrDiscard(ctx).Error(err, "Recording the mount request failed: a node-agent that restarts leaves this source to its mounter alone")
	}
	s.watch(mp, k, c)
	return nil
}

// WriteProfiles writes p into commDir, the comm dir of Mountpoint Pod mp, and records them as
// what the mounter that replaces mp's serving one gets, when mp's source is kept.
func (s *Sources) WriteProfiles(mp, commDir string, p credentials.Profiles) (credentials.Files, error) {
	files, err := credentials.WriteProfiles(commDir, p)
	if err != nil {
		return files, err
	}
	s.mu.Lock()
	c := s.kept[mp]
	s.mu.Unlock()
	if c != nil {
		c.set(p)
	}
	return files, nil
}

// open makes c the custody of mp's source, replacing any earlier one.
func (s *Sources) open(mp string, c *custody) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kept[mp] = c
}

// close forgets c, unless a later custody replaced it, and reports whether it was current.
func (s *Sources) close(mp string, c *custody) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kept[mp] != c {
		return false
	}
	delete(s.kept, mp)
	return true
}

// watch forgets c once k lets its connection go, and its record once the source is unmounted.
//
// Problem: k also lets go when this process stops (a node-agent restart, a DaemonSet roll); a
// record removed then left the restarted node-agent nothing to reattach with, and the mounter
// never handed its mount over again.
// Solution: the record goes only when the mount table no longer holds the source
// (forgetUnmounted); a record left by a source that died is replaced by the next publish's, or
// removed at the next start.
func (s *Sources) watch(mp string, k *handshake.Kept, c *custody) {
	go func() {
		<-k.Done()
		if s.close(mp, c) {
			s.forgetUnmounted(mp)
		}
	}()
}

// keepOptions are the handshake.KeepOptions of the FUSE connection of Mountpoint Pod mp's source,
// served now by the mounter of the pod of UID serving: the next mounter is found in the pod of
// that name that serves next (Next), which gets root's profile files first, and a takeover is
// reported (Config.Replaced).
func (s *Sources) keepOptions(ctx context.Context, mp string, serving types.UID, c *custody) handshake.KeepOptions {
	log := logr.FromContextOrDiscard(ctx)
	last := serving // Kept calls Next from one goroutine
	return handshake.KeepOptions{
		Log: log, ResumeWait: s.cfg.ResumeWait, ReplayWait: s.cfg.ReplayWait,
		Next: func(ctx context.Context, handedOver bool) (string, error) {
			var except types.UID
			if handedOver {
				except = last // its pod is going, even when the watch has not seen it yet
			}
			pod, err := s.pods.WaitServing(ctx, mp, except)
			if err != nil {
				return "", err
			}
			dir, err := CommDir(s.cfg.KubeletDir, string(pod.UID))
			if err != nil {
				return "", err
			}
			if pod.UID != last {
				// A new Mountpoint Pod has none of the profile files the request names.
				profiles, ok := c.get()
				if !ok {
					return "", fmt.Errorf("the keys of Mountpoint Pod %s are not known: the node-agent restarted and "+
						"the volume was not published since (kubelet publishes it again within minutes)", mp)
				}
				if _, err := credentials.WriteProfiles(dir, profiles); err != nil {
					return "", err
				}
			}
			last = pod.UID
			return filepath.Join(dir, mppod.MountSockName), nil
		},
		Resumed: func(r handshake.Resumption) {
			if s.cfg.Replaced != nil {
				// Its own goroutine: the report reads the API server and waits for the exit
				// cause, and must not hold the watch of the next mounter.
				go s.cfg.Replaced(logr.NewContext(context.WithoutCancel(ctx), log), mp, r)
			}
		},
	}
}

// reattachWait bounds how long Reattach waits for the mounters' answers.
const reattachWait = 5 * time.Second

// Reattach keeps again the FUSE connections of the sources mounted before this node-agent
// started (handshake.Reattach): their mounters kept copies and give them back, so that a mounter
// that dies or hands its mount over from now on is replaced under its workloads as if this
// process had mounted the source. Only a source whose request root recorded is reattached, and
// only when its mounter answers with that very request. A source left out (no record, another
// answer, the mount-s3 engine, a pod that is not running) is logged and left as it is: its
// mounter serves it until it is unmounted. Records of sources no longer mounted are removed. It
// returns how many sources were reattached.
func (s *Sources) Reattach(ctx context.Context) (int, error) {
	log := logr.FromContextOrDiscard(ctx).WithName("reattach")
	table, err := mount.ReadTable()
	if err != nil {
		return 0, err
	}
	mounted := func(mp string) bool {
		source, err := mppod.SourceDir(s.cfg.KubeletDir, mp)
		if err != nil {
			return false
		}
		e, ok := table.Lookup(source)
		return ok && mount.IsFUSE(e) && e.Source == mount.FUSESource
	}
	recorded, err := recordNames(s.cfg.KubeletDir)
	if err != nil {
		return 0, err
	}
	for _, mp := range recorded {
		if !mounted(mp) {
			s.forgetUnmounted(mp)
		}
	}
	names, err := mppod.SourceNames(s.cfg.KubeletDir)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, reattachWait)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for _, mp := range names {
		if !mounted(mp) {
			continue
		}
		wg.Go(func() {
			log := log.WithValues("mountpointPod", mp)
			err := s.reattach(logr.NewContext(ctx, log), mp)
			switch {
			case errors.Is(err, handshake.ErrAnswerDiffers):
				log.Error(err, "The mounter of this source answered with another request than root sent it: its Mountpoint Pod "+
					"may be compromised; it is not kept, and a mounter that ends now ends its workloads' mount; delete the "+
					"Mountpoint Pod's workloads or the pod to mount the volume afresh")
				return
			case err != nil:
				log.Info("The FUSE connection of this source is held by its mounter alone: a mounter that ends now "+
					"ends its workloads' mount", "reason", err.Error())
				return
			}
			log.Info("Keeping the FUSE connection of a source mounted before this node-agent started")
			mu.Lock()
			n++
			mu.Unlock()
		})
	}
	wg.Wait()
	return n, nil
}

// forgetUnmounted removes mp's record unless its source is mounted now: under mp's lock, which a
// publish that mounts the source and records it holds, the mount table is read again.
func (s *Sources) forgetUnmounted(mp string) {
	unlock := s.locks.Lock(mp)
	defer unlock()
	source, err := mppod.SourceDir(s.cfg.KubeletDir, mp)
	if err != nil {
		return
	}
	table, err := mount.ReadTable()
	if err != nil {
		return
	}
	if e, ok := table.Lookup(source); ok && mount.IsFUSE(e) {
		return
	}
	_ = removeRecord(s.cfg.KubeletDir, mp)
}

func (s *Sources) reattach(ctx context.Context, mp string) error {
	unlock, err := s.locks.LockContext(ctx, mp)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := readRecord(s.cfg.KubeletDir, mp)
	if err != nil {
		return err
	}
	pod, err := s.pods.Get(ctx, mp)
	switch {
	case err != nil:
		return err
	case pod == nil:
		return errors.New("no Mountpoint Pod of that name on this node")
	}
	commDir, err := CommDir(s.cfg.KubeletDir, string(pod.UID))
	if err != nil {
		return err
	}
	c := &custody{req: rec.Request, driverProfile: rec.DriverCredentials}
	if rec.DriverCredentials {
		c.profiles, c.known = s.cfg.DriverProfiles, true
	}
	s.open(mp, c)
	k, err := handshake.Reattach(ctx, filepath.Join(commDir, mppod.MountSockName), s.cfg.MounterUID, proto.CloneOf(rec.Request),
		s.keepOptions(ctx, mp, pod.UID, c))
	if err != nil {
		s.close(mp, c)
		return err
	}
	s.watch(mp, k, c)
	return nil
}
