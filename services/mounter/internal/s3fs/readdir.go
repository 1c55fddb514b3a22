package s3fs

import (
	"context"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// listPageSize is the MaxKeys of one ListObjectsV2 page.
const listPageSize = 1000

// Readdir streams the directory: local children first, then ListObjectsV2 pages fetched as the
// kernel reads on, so a huge directory is never held whole and costs one request per page.
// Pages are fetched under the mount's lifetime, not the first READDIR request's.
func (d *dirNode) Readdir(context.Context) (fs.DirStream, syscall.Errno) {
	s := &dirStream{d: d}
	s.reset()
	return s, 0
}

// dirStream merges one listing's common prefixes and objects into directory entries.
//
// Problem: a file "a" and a directory "a/" may both exist, and the directory must shadow the
// file; but keys such as "a.txt" sort between "a" and "a/", so the two are not adjacent.
// Solution: a file is held back until the listing passes name+"/"; a directory of that name
// arriving first drops it.
// Invariant: held files all have names that are prefixes of later keys, so the hold is small.
type dirStream struct {
	d *dirNode

	local   map[string]bool
	ready   []fuse.DirEntry
	held    []fuse.DirEntry // files waiting for a possible directory of the same name
	token   *string
	started bool
	done    bool
	errno   syscall.Errno
}

var _ fs.FileSeekdirer = (*dirStream)(nil)

func (s *dirStream) reset() {
	entries := s.d.localEntries()
	s.local = make(map[string]bool, len(entries))
	for _, e := range entries {
		s.local[e.Name] = true
	}
	s.ready, s.held, s.token, s.started, s.done, s.errno = entries, nil, nil, false, false, 0
}

// Seekdir lists the directory again from its start and skips off entries: go-fuse numbers a
// stream's entries 1, 2, 3... (they carry no offset of their own), so off is the count the kernel
// consumed. The kernel seeks when a directory is rewound, and when a server that resumed the
// connection opened the handle again (fuseconn): the listing then continues where it was, give or
// take the entries added or removed meanwhile.
func (s *dirStream) Seekdir(_ context.Context, off uint64) syscall.Errno {
	s.reset()
	for ; off > 0 && s.HasNext(); off-- { //nolint:contextcheck // pages are fetched under the mount's lifetime (Readdir)
		if _, errno := s.Next(); errno != 0 {
			return errno
		}
	}
	return 0
}

// HasNext fetches pages until an entry is ready, the listing ends, or a request fails.
func (s *dirStream) HasNext() bool {
	for len(s.ready) == 0 && s.errno == 0 && !s.done {
		s.fetch()
	}
	if len(s.ready) == 0 && s.done && len(s.held) > 0 {
		s.ready, s.held = s.held, nil
	}
	return len(s.ready) > 0 || s.errno != 0
}

// Next returns the next entry or the error of the page that failed.
func (s *dirStream) Next() (fuse.DirEntry, syscall.Errno) {
	if len(s.ready) == 0 {
		errno := s.errno
		s.errno = 0
		s.done = true
		return fuse.DirEntry{}, errno
	}
	e := s.ready[0]
	s.ready = s.ready[1:]
	return e, 0
}

// Close ends the stream; nothing is held between pages.
func (s *dirStream) Close() {}

func (s *dirStream) fetch() {
	if s.started && s.token == nil {
		s.done = true
		return
	}
	s.started = true
	f := s.d.fsys
	rctx, cancel := f.background()
	defer cancel()
	out, err := f.client.ListObjectsV2(rctx, &s3.ListObjectsV2Input{
		Bucket:            aws.String(f.bucket),
		Prefix:            aws.String(s.d.prefix),
		Delimiter:         aws.String("/"),
		MaxKeys:           aws.Int32(listPageSize),
		ContinuationToken: s.token,
	})
	if err != nil {
		s.errno = toErrno(err)
		return
	}
	s.token = nil
	if aws.ToBool(out.IsTruncated) {
		s.token = out.NextContinuationToken
	}
	ci, pi := 0, 0
	for ci < len(out.Contents) || pi < len(out.CommonPrefixes) {
		if pi < len(out.CommonPrefixes) && (ci >= len(out.Contents) ||
			aws.ToString(out.CommonPrefixes[pi].Prefix) < aws.ToString(out.Contents[ci].Key)) {
			s.addDir(aws.ToString(out.CommonPrefixes[pi].Prefix))
			pi++
			continue
		}
		obj := out.Contents[ci]
		s.addFile(aws.ToString(obj.Key), entry{
			size: aws.ToInt64(obj.Size), mtime: aws.ToTime(obj.LastModified), etag: aws.ToString(obj.ETag),
		})
		ci++
	}
	if s.token == nil {
		s.done = true
	}
}

// release moves held files that no later key can shadow (name+"/" < key) to ready.
func (s *dirStream) release(key string) {
	keep := s.held[:0]
	for _, h := range s.held {
		if s.d.prefix+h.Name+"/" < key {
			s.ready = append(s.ready, h)
		} else {
			keep = append(keep, h)
		}
	}
	s.held = keep
}

func (s *dirStream) addDir(prefix string) {
	s.release(prefix)
	name := strings.TrimSuffix(strings.TrimPrefix(prefix, s.d.prefix), "/")
	for i, h := range s.held {
		if h.Name == name {
			s.held = append(s.held[:i], s.held[i+1:]...)
			break
		}
	}
	if !validName(name) || s.local[name] {
		return
	}
	s.d.fsys.meta.put(strings.TrimSuffix(prefix, "/"), entry{isDir: true})
	s.ready = append(s.ready, fuse.DirEntry{Name: name, Mode: syscall.S_IFDIR, Ino: inoOf(prefix)})
}

func (s *dirStream) addFile(key string, e entry) {
	s.release(key)
	name := strings.TrimPrefix(key, s.d.prefix)
	if !validName(name) || s.local[name] {
		return
	}
	s.held = append(s.held, fuse.DirEntry{Name: name, Mode: syscall.S_IFREG, Ino: inoOf(key)})
	s.d.fsys.meta.put(key, e)
}
