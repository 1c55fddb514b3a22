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
//     Pod then ends Succeeded and is deleted);
//   - 1 otherwise, after writing the error to commDir/mount.err, so that Kubernetes restarts
//     the container and the node-agent can show the operator why.
func Run(ctx context.Context, commDir string, engine Engine, stopRequested <-chan struct{}) int {
	log := logr.FromContextOrDiscard(ctx).WithValues("commDir", commDir)
	err := serve(logr.NewContext(ctx, log), commDir, engine, stopRequested)
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
	return Serve(ctx, ln, engine, stopRequested)
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
