package s3fs

import (
	"context"
)

// uncachedKey marks the context of a GET that the disk cache issues itself.
type uncachedKey struct{}

// openCache opens the mount's disk cache when --cache is given. The cache directory is emptied
// now and removed when the mount stops.
func (f *filesystem) openCache() error {
	if f.opts.CacheDir == "" {
		return nil
	}
	var limit int64
	if f.opts.MaxCacheSize != nil {
		limit = int64(*f.opts.MaxCacheSize) << 20 //nolint:gosec // bounded by the parser
	}
	c, err := openDiskCache(f.opts.CacheDir, limit, cacheBlockSize)
	if err != nil {
		return err
	}
	f.cache = c
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		<-f.ctx.Done()
		if err := c.close(); err != nil {
			f.log.Info("Cache directory not removed", "error", err.Error())
		}
	}()
	f.log.Info("Caching object content on disk", "cacheDir", c.dir, "maxCacheBytes", limit)
	return nil
}

// cachedGet serves reader.get through the mount's disk cache. ok is false when the read must
// go straight to S3: no cache, an object without ETag (its version cannot be told apart), or a
// GET the cache issues itself.
func (r *reader) cachedGet(ctx context.Context, buf []byte, off int64, progress func(int)) (n int, ok bool, err error) {
	c := r.fsys.cache
	if c == nil || r.etag == "" || ctx.Value(uncachedKey{}) != nil {
		return 0, false, nil
	}
	fetch := func(ctx context.Context, b []byte, o int64, p func(int)) (int, error) {
		return r.get(context.WithValue(ctx, uncachedKey{}, true), b, o, p)
	}
	n, err = c.read(ctx, cacheObject{key: r.key, etag: r.etag, size: r.size}, buf, off, fetch, progress)
	return n, true, err
}
