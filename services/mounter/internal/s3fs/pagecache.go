package s3fs

// pageCache decides, per file, whether an open may keep the pages the kernel has cached from
// earlier opens (FOPEN_KEEP_CACHE) instead of dropping them.
//
// Problem: without FOPEN_KEEP_CACHE the kernel drops a file's cached pages at every open, so
// rereading an unchanged object fetches it again; with it unconditionally, a replaced object
// would be served from stale pages.
// Solution: the pages are kept only when the ETag read at open equals the ETag of every page the
// kernel may hold (etag). An open that does not keep them makes the kernel drop them, after which
// the cache holds only pages of the handles then open: etag becomes the opened ETag when all
// open handles read it, and unknown ("") while a handle of another version is still open, since
// that handle may add pages of its version.
// Invariant: etag is non-empty only if every page the kernel may hold for the file was read from
// that version; open re-reads the ETag (HEAD), so a replaced object is never served from cache.
// Guarded by the fileNode's mutex.
type pageCache struct {
	etag string
	open map[string]int // open read handles by the ETag they read
}

// opened records a read handle of etag and reports whether the kernel may keep its pages.
// replayed is an open a resumed server makes for a handle the kernel already holds: the kernel
// never sees its answer, so it drops nothing, and the pages it holds are of unknown versions.
func (c *pageCache) opened(etag string, replayed bool) bool {
	if replayed {
		if c.open == nil {
			c.open = map[string]int{}
		}
		c.open[etag]++
		c.etag = ""
		return false
	}
	others := 0
	for e, n := range c.open {
		if e != etag {
			others += n
		}
	}
	keep := etag != "" && etag == c.etag && others == 0
	if others == 0 {
		c.etag = etag
	} else {
		c.etag = ""
	}
	if c.open == nil {
		c.open = map[string]int{}
	}
	c.open[etag]++
	return keep
}

// closed records that a read handle of etag was released.
func (c *pageCache) closed(etag string) {
	if c.open[etag]--; c.open[etag] <= 0 {
		delete(c.open, etag)
	}
}
