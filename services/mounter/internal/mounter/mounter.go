// Package mounter is the Mountpoint Pod side of the mount handshake: it listens on
// <comm>/mount.sock, serves the filesystem the node-agent asks for on the FUSE connection it
// passes, and turns the outcome into the exit code Kubernetes acts on.
package mounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mppod"
)

// Run listens on commDir/mount.sock and serves one filesystem through engine until it is
// unmounted or ctx ends; closing stopRequested ends only the wait for a mount request, not a
// filesystem that serves (see Serve; NotifySignals makes both from the process's signals). It
// returns the process exit code:
//
//   - 0 when commDir/mount.exit exists: the node-agent asked for a clean exit (the Mountpoint
//     Pod then ends Succeeded and is deleted), or after a stop request handed the mount over
//     (ErrHandedOver);
//   - 1 otherwise, after writing the error to commDir/mount.err, so that Kubernetes restarts
//     the container and the node-agent can show the operator why.
func Run(ctx context.Context, commDir string, engine Engine, stopRequested <-chan struct{}) int {
	log := logr.FromContextOrDiscard(ctx).WithValues("commDir", commDir)
	err := serve(logr.NewContext(ctx, log), commDir, engine, stopRequested)
	if errors.Is(err, ErrHandedOver) {
		log.Info("Exiting: the mount was handed over, the node-agent holds its connection for the next mounter")
		return 0
	}
	if exitRequested(commDir) {
		log.Info("Exiting: the node-agent asked for it", "reason", errText(err))
		return 0
	}
	if err == nil {
		err = errors.New("filesystem unmounted without a clean-exit request")
	}
	log.Error(err, "Mounter failed")
	if werr := writeErr(commDir, err); werr != nil {
		log.Error(werr, "Writing the error file failed")
	}
	return 1
}

func serve(ctx context.Context, commDir string, engine Engine, stopRequested <-chan struct{}) error {
	sock := filepath.Join(commDir, mppod.MountSockName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", sock, err)
	}
	// A previous run's error is stale once a new attempt starts.
	_ = os.Remove(filepath.Join(commDir, mppod.MountErrName))
	ln, err := handshake.Listen(sock)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(sock) }()
	logr.FromContextOrDiscard(ctx).Info("Waiting for the mount request", "socket", sock)
	watched := &takenEngine{Engine: engine}
	stop := watchExit(ctx, commDir, watched, stopRequested)
	return Serve(ctx, ln, watched, stop)
}

// exitPollInterval is how often a mounter waiting for its mount request looks for mount.exit.
const exitPollInterval = time.Second

// watchExit returns a channel closed when stopRequested closes, or when mount.exit appears before
// a mount request was taken.
//
// Problem: a Mountpoint Pod whose mount never succeeds (a refused mount option, keys S3 refuses)
// waits for a mount request that never comes; when its workloads go, the node-agent writes
// mount.exit, but nothing is mounted for it to unmount, so the mounter would wait forever.
// Solution: until it takes a request, the mounter looks for mount.exit every second and then
// stops waiting (Run exits 0, and the Mountpoint Pod ends Succeeded and is deleted).
// Invariant: mount.exit never stops a filesystem that serves: the node-agent writes it before
// the last bind goes, and the mounter exits only once the source is unmounted.
func watchExit(ctx context.Context, commDir string, engine *takenEngine, stopRequested <-chan struct{}) <-chan struct{} {
	stop := make(chan struct{})
	go func() {
		ticker := time.NewTicker(exitPollInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-stopRequested:
				close(stop)
				return
			case <-ticker.C:
				if !engine.taken.Load() && exitRequested(commDir) {
					logr.FromContextOrDiscard(ctx).Info("The node-agent asked for an exit before any mount request")
					close(stop)
					return
				}
			}
		}
	}()
	return stop
}

// takenEngine records that a mount request reached the engine.
type takenEngine struct {
	Engine
	taken atomic.Bool
}

// Mount implements Engine.
func (e *takenEngine) Mount(ctx context.Context, fd int, state *os.File, req *handshake.Request) (Mounted, error) {
	e.taken.Store(true)
	return e.Engine.Mount(ctx, fd, state, req)
}

func exitRequested(commDir string) bool {
	_, err := os.Stat(filepath.Join(commDir, mppod.MountExitName))
	return err == nil
}

func writeErr(commDir string, err error) error {
	path := filepath.Join(commDir, mppod.MountErrName)
	if werr := os.WriteFile(path, []byte(err.Error()+"\n"), 0o600); werr != nil {
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return "unmounted"
	}
	return err.Error()
}
