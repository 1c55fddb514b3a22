package s3fs

import (
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

func TestPageCacheDecisions(t *testing.T) {
	const (
		drop   = uint32(0)
		keep   = uint32(fuse.FOPEN_KEEP_CACHE)
		direct = uint32(fuse.FOPEN_DIRECT_IO | fuse.FOPEN_KEEP_CACHE)
	)
	now := time.Now()
	type step struct {
		kind  string // "open", "replay", "release", "told" (the kernel was told size), "attrs"
		etag  string
		size  int64
		flags uint32 // for an open: its FOPEN flags; for attrs: the size told to the kernel
	}
	open := func(etag string, size int64, flags uint32) step { return step{"open", etag, size, flags} }
	replay := func(etag string) step { return step{kind: "replay", etag: etag} }
	release := func(etag string) step { return step{kind: "release", etag: etag} }
	told := func(size int64) step { return step{kind: "told", size: size} }
	attrs := func(current, want int64) step { return step{kind: "attrs", size: current, flags: uint32(want)} }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"the first open of a version drops the pages and the next keeps them", []step{
			open("a", 1, drop), release("a"), open("a", 1, keep),
		}},
		{"concurrent opens of one version keep the pages", []step{
			open("a", 1, drop), open("a", 1, keep), open("a", 1, keep),
		}},
		{"a replaced object drops the pages once", []step{
			open("a", 1, drop), release("a"), open("b", 1, drop), release("b"), open("b", 1, keep),
		}},
		{"a new version read while an old one is open bypasses the pages and keeps them", []step{
			open("a", 1, drop), open("b", 1, direct), open("b", 1, direct), release("a"),
			open("b", 1, drop), open("b", 1, keep), open("a", 1, direct),
		}},
		{"the kernel is told the size of the version its pages hold while it is open", []step{
			open("a", 3, drop), attrs(5, 3), open("b", 5, direct), attrs(5, 3), release("a"), attrs(5, 5),
		}},
		{"a version larger than the size the kernel still caches reads direct", []step{
			told(3), open("b", 5, direct), told(5), open("b", 5, drop),
		}},
		{"a version smaller than the size the kernel caches reads through the pages", []step{
			told(5), open("b", 3, drop),
		}},
		{"an open replayed by a resume drops nothing, so the next open does", []step{
			replay("b"), release("b"), open("b", 1, drop), open("b", 1, keep),
		}},
		{"a replayed handle of the kept version leaves the pages unknown", []step{
			replay("a"), open("a", 1, drop), release("a"), open("a", 1, keep),
		}},
		{"an object without ETag never keeps pages nor shares them", []step{
			open("", 1, drop), release(""), open("", 1, drop), open("", 1, direct),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c pageCache
			for i, s := range tc.steps {
				e := entry{etag: s.etag, size: s.size}
				switch s.kind {
				case "release":
					c.closed(s.etag)
				case "told":
					c.reported(s.size, now, time.Minute)
				case "attrs":
					if got := c.attrs(e).size; got != int64(s.flags) {
						t.Fatalf("step %d: the kernel is told size %d, want %d", i, got, s.flags)
					}
				default:
					if got := c.opened(e, s.kind == "replay", now); s.kind == "open" && got != s.flags {
						t.Fatalf("step %d: open of %q has flags %#x, want %#x", i, s.etag, got, s.flags)
					}
				}
			}
		})
	}
}
