// Package s3fs is s3csi-mounter's filesystem: it serves an S3 bucket over FUSE with mount-s3's
// semantics (sequential writes streamed as multipart uploads and visible on close, overwrite and
// delete only when allowed, no rename or links, directories as common prefixes), prefetching
// sequential reads with parallel ranged GETs inside a fixed memory budget.
//
// Mount serves either a directory it mounts itself (as root) or a /dev/fd/N mount point whose
// /dev/fuse descriptor a privileged process opened and mounted, so the server needs no privilege.
package s3fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/go-logr/logr"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mountargs"
)

// Defaults for values mount-s3's options leave unset.
const (
	DefaultPartSize              = 8 << 20
	DefaultMemoryTarget          = 512 << 20
	DefaultMaxThreads            = 16
	DefaultRequestTimeout        = 30 * time.Second
	defaultMetadataTTL           = time.Second
	maxWrite                     = 1 << 20
	indefiniteTTL                = 100 * 365 * 24 * time.Hour
	defaultFileMode       uint32 = 0o644
	defaultDirMode        uint32 = 0o755
)

// ErrMountedByOwner is returned by Unmount for a /dev/fd/N mount: the process that mounted the
// directory owns it and must unmount it; Wait returns once it has.
var ErrMountedByOwner = errors.New("mount point is a passed /dev/fuse descriptor: its owner unmounts it")

// Config is what a mount needs besides its mount point.
type Config struct {
	// Options are the mount-s3 options; Options.Bucket names the bucket.
	Options mountargs.Options
	// Credentials signs requests; nil uses NewReloadingCredentials(Options.Profile).
	Credentials aws.CredentialsProvider
	// Log receives mount-level events; never credentials.
	Log logr.Logger
	// Memory is the mount's memory plan (PlanMemory); zero plans from Options alone, as if the
	// container had no memory limit.
	Memory MemoryPlan
	// RequestTimeout bounds one S3 request including retries; a file operation waiting on a
	// request that times out fails with EIO. Zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
}

func (c *Config) maxThreads() int {
	if c.Options.MaxThreads != nil {
		return *c.Options.MaxThreads
	}
	return DefaultMaxThreads
}

// Stats are counters of a mount, for tests and benchmarks.
type Stats struct {
	// BufferBytes is the memory currently reserved for read-ahead and upload buffers.
	BufferBytes int64
	// PeakBufferBytes is the highest BufferBytes seen.
	PeakBufferBytes int64
	// BufferLimit is the reservation limit (MemoryPlan.Buffers).
	BufferLimit int64
	// ReadRequests counts the ranged GETs issued for reads, prefetch included.
	ReadRequests int64
	// ReadBytes is the bytes those GETs asked for.
	ReadBytes int64
}

// Mounted is a served mount.
type Mounted struct {
	server     *fuse.Server
	fs         *filesystem
	mountPoint string
	passedFD   bool
}

// Mount mounts the bucket at mountPoint and serves it in the background until it is unmounted.
// mountPoint is a directory (the caller must be root) or "/dev/fd/N", a /dev/fuse descriptor
// already mounted by its owner with max_read equal to 1 MiB. ctx bounds only the set-up.
func Mount(ctx context.Context, mountPoint string, cfg Config) (*Mounted, error) {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	creds := cfg.Credentials
	if creds == nil {
		creds = NewReloadingCredentials(cfg.Options.Profile)
	}
	client, err := newClient(ctx, &cfg.Options, creds, &cfg)
	if err != nil {
		return nil, err
	}
	fsys := newFilesystem(client, &cfg)
	if err := fsys.checkAccess(ctx); err != nil {
		fsys.stop()
		return nil, err
	}
	if err := fsys.openCache(); err != nil {
		fsys.stop()
		return nil, err
	}
	root := &dirNode{fsys: fsys, prefix: cfg.Options.Prefix, local: map[string]*fs.Inode{}}
	ttl, negTTL := fsys.ttl, fsys.negTTL
	fsOpts := &fs.Options{
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &negTTL,
		UID:             fsys.uid,
		GID:             fsys.gid,
		MountOptions:    fsys.mountOptions(),
	}
	passed := strings.HasPrefix(mountPoint, "/dev/fd/")
	if passed {
		// Problem: go-fuse tries a direct mount(2) before it recognizes /dev/fd/N, and as root
		// that mount succeeds on the descriptor's target, /dev/fuse itself.
		// Solution: never mount a passed descriptor: its owner already did.
		// Invariant: a /dev/fd/N mount point only ever serves the connection it names.
		fsOpts.DirectMount = false
		fsOpts.DirectMountStrict = false
	}
	raw := restrictAccess(fs.NewNodeFS(root, fsOpts), uint32(os.Geteuid()), cfg.Options.AllowOther, cfg.Options.AllowRoot) //nolint:gosec // uids fit 32 bits
	server, err := fuse.NewServer(raw, mountPoint, &fsOpts.MountOptions)
	if err != nil {
		fsys.stop()
		return nil, fmt.Errorf("mount %s: %w", mountPoint, err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		fsys.stop()
		return nil, fmt.Errorf("wait for mount %s: %w", mountPoint, err)
	}
	if !passed {
		// A passed descriptor's owner sets the readahead: it alone knows the mount point.
		if err := mount.SetReadAhead(mountPoint, mount.FUSEReadAheadKiB); err != nil {
			cfg.Log.Info("Sequential reads use the kernel's default readahead", "mountPoint", mountPoint, "error", err.Error())
		}
	}
	cfg.Log.Info("Serving bucket", "bucket", cfg.Options.Bucket, "prefix", cfg.Options.Prefix, "mountPoint", mountPoint)
	return &Mounted{server: server, fs: fsys, mountPoint: mountPoint, passedFD: passed}, nil
}

// MountFD serves a /dev/fuse descriptor that its owner already mounted; see Mount.
func MountFD(ctx context.Context, fd int, cfg Config) (*Mounted, error) {
	return Mount(ctx, fmt.Sprintf("/dev/fd/%d", fd), cfg)
}

// Wait blocks until the kernel closes the FUSE connection (the mount point was unmounted), then
// cancels outstanding S3 requests and waits for the filesystem's goroutines to end.
func (m *Mounted) Wait() {
	m.server.Wait()
	m.fs.stop()
}

// Unmount unmounts a directory mount, lazily if it is busy; Wait returns afterwards. For a
// /dev/fd/N mount it returns ErrMountedByOwner.
func (m *Mounted) Unmount() error {
	if m.passedFD {
		return ErrMountedByOwner
	}
	if err := m.server.Unmount(); err != nil {
		if lerr := syscall.Unmount(m.mountPoint, syscall.MNT_DETACH); lerr != nil {
			return fmt.Errorf("unmount %s: %w", m.mountPoint, errors.Join(err, lerr))
		}
	}
	return nil
}

// Stats returns the mount's counters.
func (m *Mounted) Stats() Stats {
	b := m.fs.budget
	return Stats{
		BufferBytes: b.used.Load(), PeakBufferBytes: b.peak.Load(), BufferLimit: b.limit,
		ReadRequests: m.fs.stats.readRequests.Load(), ReadBytes: m.fs.stats.readBytes.Load(),
	}
}

func (f *filesystem) mountOptions() fuse.MountOptions {
	o := fuse.MountOptions{
		FsName:             "s3csi:" + f.bucket,
		Name:               "s3csi",
		MaxWrite:           maxWrite,
		MaxReadAhead:       maxWrite,
		DisableReadDirPlus: true,
		DisableXAttrs:      true,
		DisableSplice:      true,
		MaxBackground:      64,
		Debug:              os.Getenv("S3CSI_FUSE_DEBUG") != "",
		DirectMount:        true,
	}
	// Root is another user to the kernel: --allow-root needs allow_other too, and
	// restrictAccess keeps everyone else out.
	o.AllowOther = f.opts.AllowOther || f.opts.AllowRoot
	if f.opts.ReadOnly {
		o.Options = append(o.Options, "ro")
	}
	return o
}
