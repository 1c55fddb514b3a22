package s3fs

import "sync"

// openVersions is, for each node with a file open for reading, the version (ETag) its last open
// reads. fuseconn journals it with the handle (fuseconn.Options.Version), and a server that
// resumes the connection compares it with what it opens again: an object replaced while no server
// served answers ESTALE on the old handles instead of mixing two versions.
type openVersions struct {
	mu sync.Mutex
	m  map[uint64]*openVersion
}

type openVersion struct {
	etag    string
	handles int
}

// opened records a handle of node ino opened on etag.
func (v *openVersions) opened(ino uint64, etag string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[uint64]*openVersion{}
	}
	o := v.m[ino]
	if o == nil {
		o = &openVersion{}
		v.m[ino] = o
	}
	o.etag = etag
	o.handles++
}

// closed forgets a handle of node ino.
func (v *openVersions) closed(ino uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if o := v.m[ino]; o != nil {
		if o.handles--; o.handles <= 0 {
			delete(v.m, ino)
		}
	}
}

// of is the version the last open of node ino reads, nil when none is open or it has no ETag.
func (v *openVersions) of(ino uint64) []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	if o := v.m[ino]; o != nil && o.etag != "" {
		return []byte(o.etag)
	}
	return nil
}
