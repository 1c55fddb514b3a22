package s3fs

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
)

// Block files: a header, then the block's data.
//
//	magic [4]byte | version uint32 | length uint32 | id [32]byte | crc32c uint32 per chunk
//
// A CRC-32C per chunk of the data lets a read of a few KiB check only the chunks it reads.
const (
	blockMagic   = "S3CB"
	blockVersion = 2
	blockFixed   = 4 + 4 + 4 + sha256.Size
	// cacheChunkSize is the data covered by one checksum.
	cacheChunkSize = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// blockID identifies one block of one object version: a SHA-256 of key, ETag and block index.
// Files are named after it, so a key never becomes a path.
type blockID [sha256.Size]byte

func blockIDOf(obj cacheObject, i int64) blockID {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(obj.key))) //nolint:gosec // lengths are not negative
	h.Write(n[:])
	h.Write([]byte(obj.key))
	binary.BigEndian.PutUint64(n[:], uint64(len(obj.etag))) //nolint:gosec // lengths are not negative
	h.Write(n[:])
	h.Write([]byte(obj.etag))
	binary.BigEndian.PutUint64(n[:], uint64(i)) //nolint:gosec // block indexes are not negative
	h.Write(n[:])
	var id blockID
	h.Sum(id[:0])
	return id
}

// cacheEntry is a block stored on disk.
type cacheEntry struct {
	id   blockID
	path string
	size int64 // bytes of the file, header included
	elem *list.Element
}

// header is the size of a block file's header.
func (c *diskCache) header() int64 {
	return blockFixed + 4*((c.blockSize+c.chunk-1)/c.chunk)
}

// store writes a fetched block to disk and indexes it, evicting least recently used blocks to
// stay within the limit. A block that cannot be stored is simply not cached.
func (c *diskCache) store(id blockID, data []byte) {
	size := int64(len(data)) + c.header()
	if !c.reserve(size) {
		return
	}
	path, err := c.writeBlock(id, data)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil || c.index[id] != nil {
		c.used -= size
		if err == nil {
			_ = os.Remove(path)
		}
		return
	}
	e := &cacheEntry{id: id, path: path, size: size}
	e.elem = c.lru.PushFront(e)
	c.index[id] = e
}

// reserve makes room for a file of size bytes and counts it as used; false when it does not fit.
func (c *diskCache) reserve(size int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var need int64
	if c.limit > 0 {
		if size > c.limit {
			return false
		}
		need = c.used + size - c.limit
	} else {
		avail, total, err := c.space()
		if err != nil {
			return false
		}
		floor := total * cacheFreePercent / 100
		need = int64(floor+uint64(size)) - int64(avail) //nolint:gosec // filesystem sizes fit int64
	}
	if c.evict(need) < need {
		return false
	}
	c.used += size
	return true
}

// evict removes least recently used blocks until at least need bytes are freed or none is
// left, and returns the bytes freed. c.mu is held: the files are gone before the space is
// reserved again, so the directory never holds more than the limit.
func (c *diskCache) evict(need int64) int64 {
	var freed int64
	for freed < need && c.lru.Len() > 0 {
		e, _ := c.lru.Remove(c.lru.Back()).(*cacheEntry)
		delete(c.index, e.id)
		c.used -= e.size
		freed += e.size
		_ = os.Remove(e.path)
	}
	return freed
}

// drop forgets a block whose file failed its checks and removes the file.
func (c *diskCache) drop(e *cacheEntry) {
	c.mu.Lock()
	if c.index[e.id] == e {
		delete(c.index, e.id)
		c.lru.Remove(e.elem)
		c.used -= e.size
	}
	c.mu.Unlock()
	_ = os.Remove(e.path)
}

// writeBlock writes a block file atomically (a temporary file renamed into place) and returns
// its path. Every file gets a fresh name, so removing an evicted file never hits a newer copy.
func (c *diskCache) writeBlock(id blockID, data []byte) (string, error) {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return "", errors.New("write cache block: cache closed")
	}
	c.mu.Lock()
	c.gen++
	name := hex.EncodeToString(id[:16]) + "-" + strconv.FormatUint(c.gen, 36)
	c.mu.Unlock()
	hdr := make([]byte, c.header())
	copy(hdr[:4], blockMagic)
	binary.BigEndian.PutUint32(hdr[4:], blockVersion)
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(data))) //nolint:gosec // blocks are small
	copy(hdr[12:], id[:])
	for k := int64(0); k*c.chunk < int64(len(data)); k++ {
		chunk := data[k*c.chunk : min((k+1)*c.chunk, int64(len(data)))]
		binary.BigEndian.PutUint32(hdr[blockFixed+4*k:], crc32.Checksum(chunk, castagnoli))
	}
	tmp, err := os.CreateTemp(c.dir, ".tmp-")
	if err != nil {
		return "", fmt.Errorf("write cache block: %w", err)
	}
	_, err = tmp.Write(hdr)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	path := filepath.Join(c.dir, name)
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("write cache block: %w", err)
	}
	return path, nil
}

// readBlock reads bytes [lo, lo+len(dst)) of a block of length n from its file into dst, lo
// and lo+len(dst) on chunk boundaries (or n), and reports whether the file holds that block
// (identity and length) with those chunks intact.
func (c *diskCache) readBlock(e *cacheEntry, n, lo int64, dst []byte) bool {
	f, err := os.Open(e.path)
	if err != nil {
		return false
	}
	defer f.Close()
	hdr := make([]byte, c.header())
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return false
	}
	if string(hdr[:4]) != blockMagic || binary.BigEndian.Uint32(hdr[4:]) != blockVersion ||
		int64(binary.BigEndian.Uint32(hdr[8:])) != n || blockID(hdr[12:blockFixed]) != e.id {
		return false
	}
	if _, err := f.ReadAt(dst, c.header()+lo); err != nil {
		return false
	}
	for at := int64(0); at < int64(len(dst)); at += c.chunk {
		k := (lo + at) / c.chunk
		chunk := dst[at:min(at+c.chunk, int64(len(dst)))]
		if crc32.Checksum(chunk, castagnoli) != binary.BigEndian.Uint32(hdr[blockFixed+4*k:]) {
			return false
		}
	}
	return true
}
