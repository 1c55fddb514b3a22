// Command s3csi-mounter is the Mountpoint Pod's FUSE S3 client: `s3csi-mounter [OPTIONS] BUCKET
// DIRECTORY` with mount-s3's options and semantics, where DIRECTORY may be /dev/fd/N, a
// /dev/fuse descriptor a privileged process opened, mounted and passed, so that the mounter
// itself needs no privilege.
//
// In a Mountpoint Pod it runs as `s3csi-mounter --comm-dir=DIR`: it listens on DIR/mount.sock
// for the node-agent's mount request (the /dev/fuse descriptor, bucket and options), serves it,
// and exits 0 when DIR/mount.exit exists, else writes DIR/mount.err and exits 1.
//
// With S3CSI_MOUNTER_ENGINE=mount-s3 it runs AWS's mount-s3 binary (from PATH, or the path in
// S3CSI_MOUNT_S3_PATH) with the same options instead, in both modes: on the command line it
// replaces itself with mount-s3; in a Mountpoint Pod it starts mount-s3 on the passed descriptor.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/logging"
	"github.com/s3csi/s3csi/shared/mountargs"

	"github.com/s3csi/s3csi/services/node-agent/internal/handshake"
	"github.com/s3csi/s3csi/services/node-agent/internal/mounter"
	"github.com/s3csi/s3csi/services/node-agent/internal/s3fs"
)

const binary = "s3csi-mounter"

// memoryHeadroom is the memory allowed beyond the data buffers (metadata, requests, runtime).
const memoryHeadroom = 128 << 20

func main() {
	os.Exit(run())
}

// run returns 0 after the mount ends, 1 when serving fails and 2 for bad arguments.
func run() int {
	if len(os.Args) == 2 && strings.HasPrefix(os.Args[1], commDirFlag) {
		return serveCommDir(strings.TrimPrefix(os.Args[1], commDirFlag))
	}
	if len(os.Args) == 2 && strings.HasPrefix(os.Args[1], autoUnmountFlag) {
		return watchAndUnmount(strings.TrimPrefix(os.Args[1], autoUnmountFlag))
	}
	opts, err := mountargs.Parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\nUsage: %s [OPTIONS] BUCKET DIRECTORY\n", binary, err, binary)
		return 2
	}
	if os.Getenv(engineEnv) == engineMountS3 {
		return execMountS3(opts)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// Buffers are recycled, but garbage from requests would otherwise let the heap grow to
		// twice the live size: ask the collector to keep the process near its buffer budget.
		debug.SetMemoryLimit(s3fs.BufferLimit(&opts) + memoryHeadroom)
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
	m, err := s3fs.Mount(ctx, opts.MountPoint, s3fs.Config{Options: opts, Log: log})
	if err != nil {
		log.Error(err, "Mount failed")
		return 1
	}
	done := make(chan struct{})
	go func() {
		m.Wait()
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

// commDirFlag selects the socket mode of a Mountpoint Pod.
const commDirFlag = "--comm-dir="

// serveCommDir serves the one mount the node-agent asks for over DIR/mount.sock.
func serveCommDir(dir string) int {
	if dir == "" {
		fmt.Fprintf(os.Stderr, "%s: %sDIR needs a directory\n", binary, commDirFlag)
		return 2
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(s3fs.DefaultMemoryTarget + memoryHeadroom)
	}
	log := logging.New(logging.NewOptions(), os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var engine handshake.Engine = &mounter.S3Engine{CommDir: dir, Log: log}
	if os.Getenv(engineEnv) == engineMountS3 {
		path, err := mountS3Path()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", binary, err)
			return 1
		}
		engine = &mounter.MountS3Engine{Path: path, CommDir: dir, Log: log}
	}
	return mounter.Run(logr.NewContext(ctx, log), dir, engine)
}

// The engine switch: engineEnv=engineMountS3 runs AWS's mount-s3 (from PATH, or mountS3PathEnv).
const (
	engineEnv      = "S3CSI_MOUNTER_ENGINE"
	engineMountS3  = "mount-s3"
	mountS3PathEnv = "S3CSI_MOUNT_S3_PATH"
)

func mountS3Path() (string, error) {
	if path := os.Getenv(mountS3PathEnv); path != "" {
		return path, nil
	}
	path, err := exec.LookPath("mount-s3")
	if err != nil {
		return "", fmt.Errorf("%s=%s but no mount-s3 binary: %w", engineEnv, engineMountS3, err)
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
