package s3fs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// pageCache decides, per file, how the kernel serves each read handle: through the file's page
// cache, keeping the pages earlier opens cached (FOPEN_KEEP_CACHE) or dropping them, or around it
// (FOPEN_DIRECT_IO).
//
// Problem: the kernel has one page cache and one size (i_size) per file for all its handles, while
// each handle reads the version it saw at open. Dropping the pages at every open refetches
// unchanged objects; keeping them always serves replaced ones stale; and a second open that sees
// a new version and reads it into the pages, or tells the kernel its size, hands an older handle
// still open the new bytes, or an end of file at the new size.
// Solution: the pages belong to one version, owner. An open of owner's version, or any open while
// no handle of owner is open (it becomes owner), reads through them, keeping them only when they
// are of its version (etag); any other open reads direct, leaving owner's pages alone. The kernel is told
// owner's size while a handle of owner is open (attrs). An open of a version larger than the size
// the kernel may still cache (reportedSize, within the attribute timeout) reads direct too, since
// the kernel ends cached reads at that size.
// Invariant: every page the kernel holds is of owner (or of unknown version when etag is ""),
// every handle reading through the pages reads owner, and the kernel's size is owner's while one
// is open: no handle reads another version's bytes or ends before its own version does (short of
// mmap of a direct handle, which the kernel serves through the page cache). Guarded by the
// fileNode's mutex.
type pageCache struct {
	// etag is the version of every page the kernel may hold, "" when unknown.
	etag string
	// owner is the version whose handles read through the page cache, and the attributes told
	// to the kernel while one of them is open.
	owner entry
	open  map[string]int // open read handles by the ETag they read, direct ones included
	// reportedSize is the last size told to the kernel, which caches it until reportedUntil.
	reportedSize  int64
	reportedUntil time.Time
}

// opened records a read handle of version e and returns the FOPEN flags it is opened with.
// replayed is an open a resumed server makes for a handle the kernel already holds: the kernel
// never sees its answer, so it drops nothing, and the pages it holds are of unknown versions.
func (c *pageCache) opened(e entry, replayed bool, now time.Time) uint32 {
	if c.open == nil {
		c.open = map[string]int{}
	}
	defer func() { c.open[e.etag]++ }()
	ownerOpen := c.open[c.owner.etag] > 0
	if replayed {
		if !ownerOpen {
			c.owner = e
		}
		c.etag = ""
		return 0
	}
	sameVersion := e.etag != "" && e.etag == c.owner.etag
	if ownerOpen && !sameVersion {
		// A handle of another version reads through the cache: keep its pages, add none.
		return fuse.FOPEN_DIRECT_IO | fuse.FOPEN_KEEP_CACHE
	}
	if !sameVersion && e.size > c.reportedSize && now.Before(c.reportedUntil) {
		// The kernel may still take the file for reportedSize bytes long and end reads there.
		return fuse.FOPEN_DIRECT_IO | fuse.FOPEN_KEEP_CACHE
	}
	keep := e.etag != "" && e.etag == c.etag
	c.owner, c.etag = e, e.etag
	if keep {
		return fuse.FOPEN_KEEP_CACHE
	}
	return 0
}

// writingETag is what an O_RDWR handle that began overwriting the file is counted under: nothing,
// since it reads no more; its release then closes nothing.
const writingETag = "\x00writing"

// closed records that a read handle of etag was released.
func (c *pageCache) closed(etag string) {
	if etag == writingETag {
		return
	}
	if c.open[etag]--; c.open[etag] <= 0 {
		delete(c.open, etag)
	}
}

// readers is the number of open read handles.
func (c *pageCache) readers() int {
	n := 0
	for _, k := range c.open {
		n += k
	}
	return n
}

// attrs returns the version whose attributes the kernel must be told: owner while one of its
// handles is open, else current.
func (c *pageCache) attrs(current entry) entry {
	if c.open[c.owner.etag] > 0 {
		return c.owner
	}
	return current
}

// reported records that the kernel was told size, which it caches for ttl from now.
func (c *pageCache) reported(size int64, now time.Time, ttl time.Duration) {
	c.reportedSize, c.reportedUntil = size, now.Add(ttl)
}
