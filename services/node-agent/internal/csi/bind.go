package csi

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/mount"
)

// bind bind-mounts source on the target and checks in the mount table that the target is a
// bind of this driver's FUSE mount at source; on failure it leaves nothing behind. It never
// stats through the mount (the caller holds the Mountpoint Pod's lock): answers does, after the
// lock. It returns whether it created the target dir.
func (s *Server) bind(source string, p *publishRequest) (bool, error) {
	created := false
	err := os.Mkdir(p.Target, 0o750)
	if errors.Is(err, os.ErrNotExist) {
		err = os.MkdirAll(p.Target, 0o750)
	}
	switch {
	case err == nil:
		created = true
	case !errors.Is(err, os.ErrExist):
		return false, status.Errorf(codes.Internal, "create target dir: %v", err)
	}
	fail := func(err error) error {
		_ = mount.Unmount(p.Target)
		if created {
			_ = mount.RemoveDir(p.Target)
		}
		return status.Errorf(codes.Internal, "%v", err)
	}
	if err := mount.BindMount(source, p.Target, p.ReadOnly); err != nil {
		return false, fail(err)
	}
	if err := verifyTable(p.Target, source); err != nil {
		return false, fail(err)
	}
	return created, nil
}

// answers checks, with a bounded stat, that the filesystem at a just bound target answers; when
// it does not, it removes the bind (detaching it when the stat timed out, since the blocked
// probe keeps it busy) and the target dir it created.
func (s *Server) answers(ctx context.Context, target string, created bool) error {
	_, err := mount.Stat(target, mount.ProbeTimeout)
	if err == nil {
		return nil
	}
	remove := mount.Unmount
	if errors.Is(err, mount.ErrNotAnswering) {
		remove = mount.Detach
	}
	if rerr := remove(target); rerr != nil {
		logr.FromContextOrDiscard(ctx).Error(rerr, "Removing the unverified bind failed", "target", target)
	} else if created {
		_ = mount.RemoveDir(target)
	}
	if errors.Is(err, mount.ErrNotAnswering) {
		return notAnswering(target, s.cfg.MountpointNamespace)
	}
	return status.Errorf(codes.Internal, "verify %s: the filesystem does not answer: %v", target, err)
}

// notAnswering is the error of a publish whose filesystem did not answer a bounded stat.
func notAnswering(target, namespace string) error {
	return status.Errorf(codes.Unavailable, "the filesystem at %s does not answer (its Mountpoint Pod is stopped or stuck); "+
		"see the logs of the Mountpoint Pods in namespace %s, or restart the workload pod", target, namespace)
}

// verify checks that target is a bind of the live FUSE mount at source; the stat through target
// is bounded (mount.ErrNotAnswering).
func verify(target, source string) error {
	if err := verifyTable(target, source); err != nil {
		return err
	}
	if _, err := mount.Stat(target, mount.ProbeTimeout); err != nil {
		return fmt.Errorf("verify %s: the filesystem does not answer: %w", target, err)
	}
	return nil
}

// verifyTable checks, in the mount table only, that target is a bind of this driver's FUSE
// mount at source.
func verifyTable(target, source string) error {
	table, err := mount.ReadTable()
	if err != nil {
		return err
	}
	t, ok := table.Lookup(target)
	if !ok {
		return fmt.Errorf("verify %s: not mounted", target)
	}
	src, ok := table.Lookup(source)
	if !ok || !mount.IsFUSE(src) || src.Source != mount.FUSESource {
		return fmt.Errorf("verify %s: source %s is not this driver's FUSE mount", target, source)
	}
	if !mount.SameDevice(t, src) {
		return fmt.Errorf("verify %s: not a bind of %s", target, source)
	}
	return nil
}
