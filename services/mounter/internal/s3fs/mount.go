// Package s3fs is s3csi-mounter's filesystem: it serves an S3 bucket over FUSE with mount-s3's
// semantics (sequential writes streamed as multipart uploads and visible on close, overwrite and
// delete only when allowed, no rename or links, directories as common prefixes), prefetching
// sequential reads with parallel ranged GETs inside a fixed memory budget.
//
// Mount serves either a directory it mounts itself (as root) or a /dev/fd/N mount point whose
// /dev/fuse descriptor a privileged process opened and mounted, so the server needs no privilege.
// Its request loop is fuseconn's: with Config.State, a server that stopped or died can be
// replaced by another one that resumes the same connection.
package s3fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/go-logr/logr"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/mount"

	"github.com/s3csi/s3csi/services/mounter/internal/fuseconn"
	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
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

// ErrStopped is returned by Wait after Stop: the connection stays with whoever else holds its
// descriptor, for a server that resumes it.
var ErrStopped = fuseconn.ErrStopped

// ErrResendUnsupported is wrapped by the error of a resumed mount whose kernel cannot resend the
// requests the previous server had read without answering (Linux before 6.9).
var ErrResendUnsupported = fuseconn.ErrResendUnsupported

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
	// State, when set, is where the mount records what the kernel holds (node ids, open
	// handles, the negotiated INIT), so that another server can resume the connection after
	// this one stopped or died: an empty file (a memfd) for a new mount, the previous server's
	// for Resume.
	State *os.File
	// Resume takes the connection over from State instead of answering a new mount's INIT.
	Resume bool
	// CABundle is PEM certificates of CAs the S3 client trusts for the endpoint's certificate
	// in addition to the system roots (the driver's, from the mount request); nil: none.
	CABundle []byte
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
	conn       *fuseconn.Conn
	fs         *filesystem
	dev        *os.File
	mountPoint string
	passedFD   bool
}

// Mount mounts the bucket at mountPoint and serves it in the background until it is unmounted.
// mountPoint is a directory (the caller must be root; it is mounted as the node-agent mounts a
// source) or "/dev/fd/N", which MountFD serves. ctx bounds only the set-up.
func Mount(ctx context.Context, mountPoint string, cfg Config) (*Mounted, error) {
	if n, ok := strings.CutPrefix(mountPoint, "/dev/fd/"); ok {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 0 {
			return nil, fmt.Errorf("mount point %s: not a descriptor number", mountPoint)
		}
		return MountFD(ctx, fd, cfg)
	}
	if cfg.Resume {
		return nil, errors.New("resume needs the connection's descriptor (MountFD), not a directory")
	}
	fsys, raw, err := prepareFS(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	dev, err := mount.FUSE(mountPoint, cfg.Options.ReadOnly)
	if err != nil {
		fsys.stop()
		return nil, err
	}
	m, err := serve(raw, fsys, dev, &cfg)
	if err != nil {
		_ = unix.Unmount(mountPoint, unix.MNT_DETACH)
		return nil, fmt.Errorf("mount %s: %w", mountPoint, err)
	}
	m.mountPoint = mountPoint
	if err := mount.SetReadAhead(mountPoint, mount.FUSEReadAheadKiB); err != nil {
		cfg.Log.Info("Sequential reads use the kernel's default readahead", "mountPoint", mountPoint, "error", err.Error())
	}
	disablePoll(mountPoint, cfg.Log)
	cfg.Log.Info("Serving bucket", "bucket", cfg.Options.Bucket, "prefix", cfg.Options.Prefix, "mountPoint", mountPoint)
	return m, nil
}

// MountFD serves fd, a /dev/fuse descriptor that its owner opened and mounted with max_read
// equal to 1 MiB, and owns it from then on: it is closed on error and when the mount ends. The
// owner sets the readahead: it alone knows the mount point. With cfg.Resume it takes the
// connection over from cfg.State; an error wrapping ErrResendUnsupported comes with a mount
// that serves.
func MountFD(ctx context.Context, fd int, cfg Config) (*Mounted, error) {
	dev := os.NewFile(uintptr(fd), "/dev/fuse") //nolint:gosec // descriptors are not negative
	fsys, raw, err := prepareFS(ctx, &cfg)
	if err != nil {
		_ = dev.Close()
		return nil, err
	}
	m, err := serve(raw, fsys, dev, &cfg)
	if m == nil {
		return nil, fmt.Errorf("serve /dev/fd/%d: %w", fd, err)
	}
	m.mountPoint, m.passedFD = fmt.Sprintf("/dev/fd/%d", fd), true
	cfg.Log.Info("Serving bucket", "bucket", cfg.Options.Bucket, "prefix", cfg.Options.Prefix, "resumed", cfg.Resume)
	return m, err
}

// prepareFS makes the filesystem of cfg and checks that its bucket answers.
func prepareFS(ctx context.Context, cfg *Config) (*filesystem, fuse.RawFileSystem, error) {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	creds := cfg.Credentials
	if creds == nil {
		creds = NewReloadingCredentials(cfg.Options.Profile)
	}
	client, err := newClient(ctx, &cfg.Options, creds, cfg)
	if err != nil {
		return nil, nil, err
	}
	for _, o := range cfg.Options.Ignored() {
		cfg.Log.Info("Option has no effect in s3csi-mounter", "option", o.Name, "reason", o.Reason)
	}
	fsys := newFilesystem(client, cfg)
	if err := fsys.checkAccess(ctx); err != nil {
		fsys.stop()
		return nil, nil, err
	}
	if err := fsys.openCache(); err != nil {
		fsys.stop()
		return nil, nil, err
	}
	root := &dirNode{fsys: fsys, prefix: cfg.Options.Prefix, local: map[string]*fs.Inode{}}
	ttl, negTTL := fsys.ttl, fsys.negTTL
	fsOpts := &fs.Options{
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &negTTL,
		UID:             fsys.uid,
		GID:             fsys.gid,
		// Node ids are the keys' inode numbers, so a server that resumes the connection gives
		// each key the id the kernel already holds.
		ExternalNodeID: true,
		// --file-mode 000 and --dir-mode 000 mean mode 0: without this go-fuse turns a zero
		// mode into 0644 or 0755 and, with --allow-other, lets every user read the bucket.
		NullPermissions: true,
	}
	euid := uint32(os.Geteuid()) //nolint:gosec // uids fit 32 bits
	return fsys, restrictAccess(recordOwners(fs.NewNodeFS(root, fsOpts), &fsys.callers), euid, cfg.Options.AllowOther, cfg.Options.AllowRoot), nil
}

// serve answers the connection's INIT, or resumes it from cfg.State, and serves it in the
// background. On an error with a nil Mounted it has stopped fsys and closed dev; an error with a
// Mounted is a resume whose kernel cannot resend (ErrResendUnsupported).
func serve(raw fuse.RawFileSystem, fsys *filesystem, dev *os.File, cfg *Config) (*Mounted, error) {
	mo := fsys.mountOptions()
	o := fuseconn.Options{Journal: cfg.State, Log: cfg.Log, UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), //nolint:gosec // ids fit 32 bits
		Version: fsys.versions.of}
	start := fuseconn.Serve
	if cfg.Resume {
		start = fuseconn.Resume
	}
	conn, err := start(int(dev.Fd()), raw, &mo, o)
	if conn == nil {
		fsys.stop()
		_ = dev.Close()
		return nil, err
	}
	return &Mounted{conn: conn, fs: fsys, dev: dev}, err
}

// disablePoll makes the kernel stop sending POLL requests before anything reads the mount.
//
// Problem: Go registers each file it opens with epoll, from inside the runtime; epoll_ctl on a
// FUSE file sends the server a POLL and waits for the answer. In a process that reads its own
// mount (a test, a benchmark) a garbage collection starting then waits for that thread, and the
// server's goroutines wait for the collection: the process hangs.
// Solution: answer POLL with ENOSYS (the kernel then never sends another) and send the first one
// now, with open(2) and poll(2) as plain system calls, on a file the protocol server answers
// itself.
// Invariant: after Mount returns, no POLL reaches the server.
func disablePoll(mountPoint string, log logr.Logger) {
	fd, err := unix.Open(filepath.Join(mountPoint, pollHackName), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		log.Info("Could not switch FUSE poll off; a process reading its own mount may hang", "error", err.Error())
		return
	}
	_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0) //nolint:gosec // descriptors fit
	_ = unix.Close(fd)
}

// pollHackName is the file go-fuse's protocol server answers itself in the root directory.
const pollHackName = ".go-fuse-epoll-hack"

// Stop stops serving and returns once every request read has been answered: the connection stays
// with whoever else holds its descriptor (the node-agent), for a server that resumes it from
// Config.State. Wait returns ErrStopped afterwards.
func (m *Mounted) Stop() { m.conn.Stop() }

// Resumable reports whether a server can take the connection over from Config.State once this
// one stops: it has a state file, and the state still describes the connection.
func (m *Mounted) Resumable() bool { return m.conn.Resumable() }

// handOverCheck is how often HandOver looks for files open for writing.
const handOverCheck = 100 * time.Millisecond

// HandOver stops serving (Stop) once no file is open for writing and ready reports true, and
// serves as before until then: an upload lives in this process, and the server that takes the
// connection over could only fail it; ready is whoever holds the connection for that server
// being there. From the start, new opens for writing wait (fuseconn's HoldWriteOpens) and are
// served by the next server; HandOver stops once the ones already being served are answered
// too, so no file is opened for writing by a server that is going. waiting, when set, is called
// once with the number of files open for writing when there are any. It returns when the server
// stopped or its connection ended, or with ctx's error when ctx ends first (the held opens are
// then served here).
func (m *Mounted) HandOver(ctx context.Context, waiting func(writers int), ready func() bool) error {
	t := time.NewTicker(handOverCheck)
	defer t.Stop()
	m.conn.HoldWriteOpens()
	stopped := false
	defer func() {
		if !stopped {
			m.conn.ReleaseWriteOpens()
		}
	}()
	told := false
	for {
		n := m.conn.Writers()
		if n == 0 && m.conn.Opening() == 0 && m.conn.Writers() == 0 && ready() {
			stopped = true
			m.Stop()
			return nil
		}
		if n > 0 && !told && waiting != nil {
			waiting(n)
			told = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.conn.Done():
			return nil
		case <-t.C:
		}
	}
}

// Wait blocks until the kernel closes the FUSE connection (the mount point was unmounted: nil) or
// the server stopped (ErrStopped) or failed, then cancels outstanding S3 requests, waits for the
// filesystem's goroutines to end and closes the descriptor.
func (m *Mounted) Wait() error {
	err := m.conn.Wait()
	m.fs.stop()
	_ = m.dev.Close()
	return err
}

// Unmount unmounts a directory mount, lazily if it is busy; Wait returns afterwards. For a
// /dev/fd/N mount it returns ErrMountedByOwner.
func (m *Mounted) Unmount() error {
	if m.passedFD {
		return ErrMountedByOwner
	}
	if err := unix.Unmount(m.mountPoint, 0); err != nil {
		if lerr := unix.Unmount(m.mountPoint, unix.MNT_DETACH); lerr != nil {
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

// mountOptions are what the protocol server negotiates in INIT; the kernel mount itself is made
// by mount.FUSE, here or in the node-agent.
func (f *filesystem) mountOptions() fuse.MountOptions {
	return fuse.MountOptions{
		MaxWrite:           maxWrite,
		MaxReadAhead:       maxWrite,
		DisableReadDirPlus: true,
		DisableXAttrs:      true,
		DisableSplice:      true,
		MaxBackground:      64,
		Debug:              os.Getenv("S3CSI_FUSE_DEBUG") != "",
	}
}
