package s3fs

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// maxCachedEntries bounds the metadata cache; beyond it new entries are not cached, so a huge
// listing costs no more memory than this.
const maxCachedEntries = 200_000

// entry is what a lookup learns about a name.
type entry struct {
	isDir bool
	size  int64
	mtime time.Time
	etag  string
}

type cached struct {
	entry   entry
	missing bool
	expires time.Time
}

// metaCache remembers lookups and listings for the metadata TTLs, keyed by the object key of a
// file or the prefix (without its trailing "/") of a directory.
type metaCache struct {
	ttl, negTTL time.Duration

	mu      sync.Mutex
	entries map[string]cached
}

func newMetaCache(ttl, negTTL time.Duration) *metaCache {
	return &metaCache{ttl: ttl, negTTL: negTTL, entries: map[string]cached{}}
}

func (c *metaCache) get(key string) (cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return cached{}, false
	}
	if time.Now().After(e.expires) {
		delete(c.entries, key)
		return cached{}, false
	}
	return e, true
}

func (c *metaCache) put(key string, e entry) {
	c.store(key, cached{entry: e, expires: time.Now().Add(c.ttl)}, c.ttl)
}

func (c *metaCache) putMissing(key string) {
	c.store(key, cached{missing: true, expires: time.Now().Add(c.negTTL)}, c.negTTL)
}

func (c *metaCache) store(key string, e cached, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= maxCachedEntries {
		c.evictExpired()
		if len(c.entries) >= maxCachedEntries {
			return
		}
	}
	c.entries[key] = e
}

func (c *metaCache) evictExpired() {
	now := time.Now()
	for k, e := range c.entries {
		if now.After(e.expires) {
			delete(c.entries, k)
		}
	}
}

func (c *metaCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

// stat finds what key names: a directory when any key starts with key+"/" (a directory shadows a
// file of the same name), else the object key, else ENOENT. Both requests run in parallel.
func (f *filesystem) stat(ctx context.Context, key string) (entry, syscall.Errno) {
	if c, ok := f.meta.get(key); ok {
		if c.missing {
			return entry{}, syscall.ENOENT
		}
		return c.entry, 0
	}
	e, errno := f.statRemote(ctx, key)
	switch errno {
	case 0:
		f.meta.put(key, e)
	case syscall.ENOENT:
		f.meta.putMissing(key)
	}
	return e, errno
}

func (f *filesystem) statRemote(ctx context.Context, key string) (entry, syscall.Errno) {
	rctx, cancel := f.requestContext(ctx)
	defer cancel()
	type headResult struct {
		e   entry
		err error
	}
	headCh := make(chan headResult, 1)
	go func() {
		e, err := f.head(rctx, key)
		headCh <- headResult{e, err}
	}()
	list, listErr := f.client.ListObjectsV2(rctx, &s3.ListObjectsV2Input{
		Bucket:  aws.String(f.bucket),
		Prefix:  aws.String(key + "/"),
		MaxKeys: aws.Int32(1),
	})
	head := <-headCh
	// A HEAD error has no body to explain it; a failed listing says why (e.g. access denied).
	if listErr != nil && toErrno(listErr) != syscall.ENOENT {
		return entry{}, toErrno(listErr)
	}
	if listErr == nil && (len(list.Contents) > 0 || len(list.CommonPrefixes) > 0) {
		return entry{isDir: true}, 0
	}
	if head.err == nil {
		return head.e, 0
	}
	if listErr != nil {
		return entry{}, toErrno(listErr)
	}
	return entry{}, toErrno(head.err)
}

func (f *filesystem) head(ctx context.Context, key string) (entry, error) {
	out, err := f.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(key)})
	if err != nil {
		return entry{}, err
	}
	return entry{
		size:  aws.ToInt64(out.ContentLength),
		mtime: aws.ToTime(out.LastModified),
		etag:  aws.ToString(out.ETag),
	}, nil
}

// headFile refreshes a file's metadata when it is opened, as mount-s3 does, so that open sees a
// replaced or deleted object even within the metadata TTL.
func (f *filesystem) headFile(ctx context.Context, key string) (entry, syscall.Errno) {
	rctx, cancel := f.requestContext(ctx)
	defer cancel()
	e, err := f.head(rctx, key)
	if err != nil {
		errno := toErrno(err)
		if errors.Is(errno, syscall.ENOENT) {
			f.meta.forget(key)
		}
		return entry{}, errno
	}
	f.meta.put(key, e)
	return e, 0
}
