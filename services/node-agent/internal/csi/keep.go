package csi

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

// keepOptions are the handshake.KeepOptions of the FUSE connection of Mountpoint Pod mp's source,
// served now by the mounter of the pod of UID serving: the next mounter is found in the pod of
// that name that serves next (Next), which gets the profile files of slot first, and a takeover
// is reported (Config.Replaced).
func (s *Server) keepOptions(ctx context.Context, mp string, serving types.UID, slot *profileSlot) handshake.KeepOptions {
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
				profiles, ok := slot.get()
				if !ok {
					return "", fmt.Errorf("the profile files of Mountpoint Pod %s are not known: the node-agent restarted and "+
						"could not read them back, and no republish wrote them since", mp)
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

// kept registers k, the Kept connection of mp's source, with its profiles slot until k lets go.
func (s *Server) kept(mp string, k *handshake.Kept, slot *profileSlot) {
	go func() {
		<-k.Done()
		s.profiles.close(mp, slot)
	}()
}

// reattachWait bounds how long Reattach waits for the mounters' answers.
const reattachWait = 5 * time.Second

// Reattach keeps again the FUSE connections of the sources mounted before this node-agent
// started (handshake.Reattach): their mounters kept copies and give them back, with the request
// they serve, so that a mounter that dies or hands its mount over from now on is replaced under
// its workloads as if this process had mounted the source. The profile files are read back from
// each Mountpoint Pod's comm dir. A source whose mounter does not answer (the mount-s3 engine, a
// mounter of an older version, a pod that is not running) is logged and left as it is: its mounter
// serves it until it is unmounted. It returns how many sources were reattached.
func (s *Server) Reattach(ctx context.Context) (int, error) {
	log := logr.FromContextOrDiscard(ctx).WithName("reattach")
	names, err := mppod.SourceNames(s.cfg.KubeletDir)
	if err != nil {
		return 0, err
	}
	table, err := mount.ReadTable()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, reattachWait)
	defer cancel()
	var wg sync.WaitGroup
	var n atomic.Int32
	for _, mp := range names {
		source, err := mppod.SourceDir(s.cfg.KubeletDir, mp)
		if err != nil {
			continue
		}
		if e, ok := table.Lookup(source); !ok || !mount.IsFUSE(e) || e.Source != mount.FUSESource {
			continue
		}
		wg.Go(func() {
			log := log.WithValues("mountpointPod", mp, "source", source)
			if err := s.reattach(logr.NewContext(ctx, log), mp); err != nil {
				log.Info("The FUSE connection of this source is held by its mounter alone: a mounter that ends now "+
					"ends its workloads' mount", "reason", err.Error())
				return
			}
			log.Info("Keeping the FUSE connection of a source mounted before this node-agent started")
			n.Add(1)
		})
	}
	wg.Wait()
	return int(n.Load()), nil
}

func (s *Server) reattach(ctx context.Context, mp string) error {
	unlock, err := s.mpLocks.LockContext(ctx, mp)
	if err != nil {
		return err
	}
	defer unlock()
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
	profiles, err := credentials.ReadProfiles(commDir)
	slot := s.profiles.open(mp, profiles, err == nil)
	k, err := handshake.Reattach(ctx, filepath.Join(commDir, mppod.MountSockName), s.cfg.MounterUID, s.keepOptions(ctx, mp, pod.UID, slot))
	if err != nil {
		s.profiles.close(mp, slot)
		return err
	}
	s.kept(mp, k, slot)
	return nil
}

// profileCache holds, for each Mountpoint Pod whose source this process keeps, the profile files
// last written into its comm dir: the pod that replaces it gets them (keepOptions).
type profileCache struct {
	mu    sync.Mutex
	slots map[string]*profileSlot
}

// profileSlot is the profile files of one kept source.
type profileSlot struct {
	mu       sync.Mutex
	profiles credentials.Profiles
	known    bool
}

func (p *profileSlot) get() (credentials.Profiles, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.profiles, p.known
}

func (p *profileSlot) set(profiles credentials.Profiles) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.profiles, p.known = profiles, true
}

// open starts the slot of mp's source, replacing any earlier one.
func (c *profileCache) open(mp string, profiles credentials.Profiles, known bool) *profileSlot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slots == nil {
		c.slots = map[string]*profileSlot{}
	}
	slot := &profileSlot{profiles: profiles, known: known}
	c.slots[mp] = slot
	return slot
}

// update records the profile files just written for mp, when its source is kept.
func (c *profileCache) update(mp string, profiles credentials.Profiles) {
	c.mu.Lock()
	slot := c.slots[mp]
	c.mu.Unlock()
	if slot != nil {
		slot.set(profiles)
	}
}

// close forgets slot, unless a later one replaced it.
func (c *profileCache) close(mp string, slot *profileSlot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slots[mp] == slot {
		delete(c.slots, mp)
	}
}
