// Package app is s3csi-mounter: its two modes (the command line, and the Mountpoint Pod's
// socket mode) and the engine switch; cmd/s3csi-mounter only calls Run.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/logging"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
	"github.com/s3csi/s3csi/services/mounter/internal/mounter"
	"github.com/s3csi/s3csi/services/mounter/internal/s3fs"
)

const binary = "s3csi-mounter"

// Run runs s3csi-mounter with args (without the program name) and returns the exit code: 0
// after the mount ends, 1 when serving fails and 2 for bad arguments.
func Run(args []string) int {
	if len(args) == 1 && strings.HasPrefix(args[0], CommDirFlag) {
		return serveCommDir(strings.TrimPrefix(args[0], CommDirFlag))
	}
	if len(args) == 1 && strings.HasPrefix(args[0], autoUnmountFlag) {
		return watchAndUnmount(strings.TrimPrefix(args[0], autoUnmountFlag))
	}
	opts, err := mountargs.Parse(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\nUsage: %s [OPTIONS] BUCKET DIRECTORY\n", binary, err, binary)
		return 2
	}
	if os.Getenv(EngineEnv) == EngineMountS3 {
		return execMountS3(opts)
	}
	logOpts := logging.NewOptions()
	if opts.Debug {
		logOpts.Verbosity = logging.Debug
	}
	log := logging.New(logOpts, os.Stderr)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The watcher starts before the mount: a process forked later would inherit the /dev/fuse
	// descriptor and keep the connection alive after the mounter died.
	if opts.AutoUnmount && !strings.HasPrefix(opts.MountPoint, "/dev/fd/") {
		watch, err := startAutoUnmount(opts.MountPoint)
		if err != nil {
			log.Error(err, "Mount failed")
			return 1
		}
		defer func() { _ = watch.Close() }()
	}
	m, err := s3fs.Mount(ctx, opts.MountPoint, s3fs.Config{Options: opts, Log: log, Memory: s3fs.ApplyMemoryPlan(&opts, log)})
	if err != nil {
		log.Error(err, "Mount failed")
		return 1
	}
	done := make(chan struct{})
	go func() {
		if err := m.Wait(); err != nil {
			log.Error(err, "Serving the mount failed")
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		err := m.Unmount()
		if errors.Is(err, s3fs.ErrMountedByOwner) {
			// The owner unmounts a passed descriptor; until it does, the kernel fails requests.
			return 0
		}
		if err != nil {
			log.Error(err, "Unmount failed")
			return 1
		}
		<-done
	}
	log.Info("Mount ended", "mountPoint", opts.MountPoint)
	return 0
}

// CommDirFlag selects the socket mode of a Mountpoint Pod.
const CommDirFlag = "--comm-dir="

// serveCommDir serves the one mount the node-agent asks for over DIR/mount.sock.
func serveCommDir(dir string) int {
	if dir == "" {
		fmt.Fprintf(os.Stderr, "%s: %sDIR needs a directory\n", binary, CommDirFlag)
		return 2
	}
	log := logging.New(logging.NewOptions(), os.Stderr)
	// The first SIGTERM no longer stops a filesystem that serves (mounter.Serve).
	ctx, stopRequested, release := mounter.NotifySignals(logr.NewContext(context.Background(), log))
	defer release()
	var engine mounter.Engine = &mounter.S3Engine{CommDir: dir, Log: log}
	if os.Getenv(EngineEnv) == EngineMountS3 {
		path, err := mountS3Path()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", binary, err)
			return 1
		}
		engine = &mounter.MountS3Engine{Path: path, CommDir: dir, Log: log}
	}
	return mounter.Run(ctx, dir, engine, stopRequested)
}

// The engine switch: EngineEnv=EngineMountS3 runs AWS's mount-s3 (from PATH, or MountS3PathEnv).
const (
	EngineEnv      = "S3CSI_MOUNTER_ENGINE"
	EngineMountS3  = "mount-s3"
	MountS3PathEnv = "S3CSI_MOUNT_S3_PATH"
)

func mountS3Path() (string, error) {
	if path := os.Getenv(MountS3PathEnv); path != "" {
		return path, nil
	}
	path, err := exec.LookPath("mount-s3")
	if err != nil {
		return "", fmt.Errorf("%s=%s but no mount-s3 binary: %w", EngineEnv, EngineMountS3, err)
	}
	return path, nil
}

// execMountS3 replaces the process with mount-s3 in the foreground, on the same arguments.
func execMountS3(opts mountargs.Options) int {
	path, err := mountS3Path()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", binary, err)
		return 1
	}
	opts.Foreground = true
	args := append([]string{path}, opts.CommandLine()...)
	err = syscall.Exec(path, args, os.Environ()) //nolint:gosec // the operator chose the binary
	fmt.Fprintf(os.Stderr, "%s: exec %s: %v\n", binary, path, err)
	return 1
}
