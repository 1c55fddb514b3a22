package mounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mountopts"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
	"github.com/s3csi/s3csi/services/mounter/internal/s3fs"
)

// S3Engine serves mount requests with the s3fs filesystem.
//
// A Mountpoint Pod serves exactly one mount, so the request's settings and the paths of the
// profile files the node-agent writes into the comm dir become the process environment, where
// the AWS configuration chain reads them; the credentials are re-read whenever those files
// change, so rotation needs no remount.
type S3Engine struct {
	// CommDir is the comm emptyDir; request file names are relative to it.
	CommDir string
	// Log receives the filesystem's mount-level events.
	Log logr.Logger
}

// Mount implements Engine.
func (e *S3Engine) Mount(ctx context.Context, fd int, state *os.File, req *handshake.Request) (Mounted, error) {
	opts, env, err := prepare(e.CommDir, fd, req)
	if err == nil {
		err = setEnv(env)
	}
	if err != nil {
		_ = syscall.Close(fd) // the engine owns fd and state (Engine)
		if state != nil {
			_ = state.Close()
		}
		return nil, err
	}
	cfg := s3fs.Config{Options: opts, Log: e.Log, Memory: s3fs.ApplyMemoryPlan(&opts, e.Log), State: state, Resume: req.Resume,
		CABundle: req.CaBundle}
	m, err := s3fs.MountFD(ctx, fd, cfg)
	switch {
	case m == nil:
		return nil, err
	case err != nil:
		// Resumed, but the kernel cannot resend what the previous mounter had taken: those
		// requests wait until the connection is aborted; everything else is served.
		e.Log.Error(err, "The requests the previous mounter had taken stay unanswered")
	}
	return mounted{m: m, state: state, log: e.Log}, nil
}

func setEnv(env map[string]string) error {
	for k, v := range env {
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("set %s: %w", k, err)
		}
	}
	return nil
}

// prepare checks req for the FUSE connection fd and returns its options, with fd as the mount
// point, and the environment the S3 client needs: the request's settings and the paths of the
// profile files in commDir.
func prepare(commDir string, fd int, req *handshake.Request) (mountargs.Options, map[string]string, error) {
	if req.MaxRead != mount.FUSEMaxRead {
		return mountargs.Options{}, nil, fmt.Errorf("mount was made with max_read=%d, this mounter serves %d", req.MaxRead, mount.FUSEMaxRead)
	}
	opts, err := mountargs.ParseMountOptions(req.Args)
	if err != nil {
		return mountargs.Options{}, nil, fmt.Errorf("parse mount options: %w", err)
	}
	opts.Bucket = req.Bucket
	opts.MountPoint = fmt.Sprintf("/dev/fd/%d", fd)
	if err := opts.Validate(); err != nil {
		return mountargs.Options{}, nil, fmt.Errorf("check mount options: %w", err)
	}
	if opts.CacheDir != "" {
		dir, err := cacheDir(opts.CacheDir)
		if err != nil {
			return mountargs.Options{}, nil, err
		}
		opts.CacheDir = dir
	}
	// Serve checked the request already (checkPolicy); an engine called otherwise still gives
	// the S3 client only the settings the policy allows.
	if err := mountopts.CheckEnv(req.Env); err != nil {
		return mountargs.Options{}, nil, fmt.Errorf("check mount request: %w", err)
	}
	env := map[string]string{}
	for _, kv := range req.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for key, name := range map[string]string{"AWS_CONFIG_FILE": req.ConfigFile, "AWS_SHARED_CREDENTIALS_FILE": req.CredentialsFile} {
		if name == "" {
			continue
		}
		if !filepath.IsLocal(name) {
			return mountargs.Options{}, nil, fmt.Errorf("mount request names profile file %q outside the comm dir", name)
		}
		env[key] = filepath.Join(commDir, name)
	}
	return opts, env, nil
}

// mounted adapts s3fs.Mounted to Mounted and HandingOver.
type mounted struct {
	m     *s3fs.Mounted
	state *os.File
	log   logr.Logger
}

// Wait blocks until the owner unmounted the filesystem, or it was handed over.
func (m mounted) Wait() error {
	err := m.m.Wait()
	if m.state != nil {
		_ = m.state.Close()
	}
	if errors.Is(err, s3fs.ErrStopped) {
		return ErrHandedOver
	}
	return err
}

// HandOver implements HandingOver.
func (m mounted) HandOver(ctx context.Context, keeperOpen func() bool) error {
	if m.state == nil {
		return errors.New("the node-agent sent no state file with the mount request, so no mounter can take it over")
	}
	if !m.m.Resumable() {
		return errors.New("the state file stopped describing the connection (see the error logged before)")
	}
	go func() {
		err := m.m.HandOver(ctx, func(writers int) {
			m.log.Info("Waiting for the files open for writing to be closed before handing the mount over: "+
				"an upload cannot move to another mounter", "writers", writers)
		}, keeperOpen)
		if err != nil && ctx.Err() == nil {
			m.log.Error(err, "Handing the mount over failed")
		}
	}()
	return nil
}

// cacheDir turns the --cache name of a mount request into a directory of the Mountpoint Pod.
//
// The node-agent's policy lets a volume name a cache but never a path (a host path would reach
// outside the pod), and the Scality v2 driver made any --cache value a fresh directory in the
// Mountpoint Pod's writable layer. So the name becomes <temp dir>/s3csi-cache/<name>, created
// here; the filesystem empties its cache at mount and removes it at exit. A Mountpoint Pod
// serves one mount, so no two mounts share it.
func cacheDir(name string) (string, error) {
	if !filepath.IsLocal(name) || strings.ContainsRune(name, '/') {
		return "", fmt.Errorf("cache %q is not a plain name: a mount request names a cache, never a path", name)
	}
	dir := filepath.Join(os.TempDir(), "s3csi-cache", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create the cache directory: %w", err)
	}
	return dir, nil
}
