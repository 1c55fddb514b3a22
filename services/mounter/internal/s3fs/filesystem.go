package s3fs

import (
	"context"
	"hash/fnv"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// counters count a mount's requests for Stats.
type counters struct {
	readRequests atomic.Int64
	readBytes    atomic.Int64
}

// filesystem is the state shared by every node of one mount.
type filesystem struct {
	client  *s3.Client
	opts    mountargs.Options
	bucket  string
	log     logr.Logger
	timeout time.Duration

	uid, gid          uint32
	fileMode, dirMode uint32
	ttl, negTTL       time.Duration
	readPart          int64
	writePart         int64
	maxThreads        int

	budget    *budget
	stats     counters
	meta      *metaCache
	cache     *diskCache
	versions  openVersions
	callers   callers   // who sent the WRITE and FLUSH requests in flight (closer.go)
	pool      sync.Pool // *[]byte of readPart bytes
	writePool sync.Pool // *[]byte of writePart bytes

	// ctx is canceled by stop; background requests (prefetch, uploads) derive from it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newFilesystem(client *s3.Client, cfg *Config) *filesystem {
	o := cfg.Options
	f := &filesystem{
		client:     client,
		opts:       o,
		bucket:     o.Bucket,
		log:        cfg.Log,
		timeout:    cfg.RequestTimeout,
		uid:        uint32(os.Getuid()), //nolint:gosec // uids fit in uint32
		gid:        uint32(os.Getgid()), //nolint:gosec // gids fit in uint32
		fileMode:   defaultFileMode,
		dirMode:    defaultDirMode,
		ttl:        ttlOf(o.MetadataTTL, metadataTTLDefault(&o)),
		negTTL:     ttlOf(o.NegativeMetadataTTL, 0),
		readPart:   int64(o.EffectiveReadPartSize(DefaultPartSize)),  //nolint:gosec // bounded by the parser
		writePart:  int64(o.EffectiveWritePartSize(DefaultPartSize)), //nolint:gosec // bounded by the parser
		maxThreads: cfg.maxThreads(),
	}
	if o.UID != nil {
		f.uid = *o.UID
	}
	if o.GID != nil {
		f.gid = *o.GID
	}
	if o.FileMode != nil {
		f.fileMode = *o.FileMode
	}
	if o.DirMode != nil {
		f.dirMode = *o.DirMode
	}
	buffers := cfg.Memory.Buffers
	if buffers == 0 {
		buffers = PlanMemory(&o, 0).Buffers
	}
	f.budget = newBudget(buffers)
	f.meta = newMetaCache(f.ttl, f.negTTL)
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f
}

func ttlOf(t *mountargs.TTL, def time.Duration) time.Duration {
	switch {
	case t == nil:
		return def
	case t.Indefinite:
		return indefiniteTTL
	case t.Minimal:
		return defaultMetadataTTL
	}
	return t.Duration
}

// stop cancels background requests and waits for their goroutines.
func (f *filesystem) stop() {
	f.cancel()
	f.wg.Wait()
}

// requestContext bounds one S3 request by the request timeout and the mount's lifetime; the
// caller's ctx (a FUSE request, canceled on interrupt) also cancels it.
func (f *filesystem) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, cancel := f.background()
	stop := context.AfterFunc(ctx, cancel)
	return rctx, func() {
		stop()
		cancel()
	}
}

// background bounds a request that outlives the FUSE request starting it (prefetch, part
// uploads, listing pages) by the request timeout and the mount's lifetime.
func (f *filesystem) background() (context.Context, context.CancelFunc) {
	return context.WithTimeout(f.ctx, f.timeout)
}

func (f *filesystem) getBuf() []byte {
	if p, ok := f.pool.Get().(*[]byte); ok {
		return *p
	}
	return make([]byte, f.readPart)
}

func (f *filesystem) putBuf(b []byte) {
	if int64(cap(b)) == f.readPart {
		b = b[:cap(b)]
		f.pool.Put(&b)
	}
}

// getWriteBuf returns an empty buffer with room for one write part.
func (f *filesystem) getWriteBuf() []byte {
	if p, ok := f.writePool.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, f.writePart)
}

func (f *filesystem) putWriteBuf(b []byte) {
	if int64(cap(b)) == f.writePart {
		b = b[:0]
		f.writePool.Put(&b)
	}
}

// inoOf derives a stable inode number from a key so that readdir and lookup agree.
func inoOf(key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return h.Sum64()>>1 | 2
}
