package s3fs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/testenv"
)

// multiGiBSize crosses 2 GiB, where 32-bit offsets and lengths overflow, and ends inside a part.
const multiGiBSize = 2<<30 + 3<<20 + 5

// blockSize is the unit of the generated content: block i is a function of i alone, so the
// test never holds the file in memory.
const blockSize = 1 << 20

func block(i int64, buf []byte) []byte {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(i)) //nolint:gosec // block numbers are positive
	r := rand.NewChaCha8(seed)
	_, _ = r.Read(buf[:blockSize])
	return buf[:blockSize]
}

// contentAt fills dst with the generated content at off.
func contentAt(dst []byte, off int64) {
	buf := make([]byte, blockSize)
	for n := 0; n < len(dst); {
		cur := off + int64(n)
		b := block(cur/blockSize, buf)
		n += copy(dst[n:], b[cur%blockSize:])
	}
}

// TestMultiGiBFile writes a file over 2 GiB through the mount in 1 MiB writes, checks that the
// stored object's SHA-256 is the written one, reads it back whole through the mount, and reads
// sparse ranges across part boundaries and across the 2 GiB mark.
func TestMultiGiBFile(t *testing.T) {
	s := testenv.StartS3(t)
	opts := baseOptions(s)
	dir, m := mountFS(t, s, opts, 2*time.Minute)
	path := filepath.Join(dir, "huge.bin")

	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.New()
	buf := make([]byte, blockSize)
	for off := int64(0); off < multiGiBSize; off += blockSize {
		b := block(off/blockSize, buf)[:min(blockSize, multiGiBSize-off)]
		want.Write(b)
		if _, err := f.Write(b); err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	wantSum := want.Sum(nil)

	// The posix backend stores the object as a plain file.
	if got := fileSHA256(t, filepath.Join(s.Dir, s.Bucket, "huge.bin")); !bytes.Equal(got, wantSum) {
		t.Fatal("the stored object's SHA-256 differs from what was written")
	}
	if got := fileSHA256(t, path); !bytes.Equal(got, wantSum) {
		t.Fatal("reading the file back through the mount gives another SHA-256")
	}

	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	partSize := int64(DefaultPartSize)
	rng := rand.New(rand.NewPCG(3, 4))
	offsets := []int64{0, 2<<30 - 1, 2<<30 - 100, 2 << 30, multiGiBSize - 1, multiGiBSize - 64<<10}
	for range 60 {
		boundary := rng.Int64N(multiGiBSize/partSize) * partSize
		offsets = append(offsets, max(0, boundary-rng.Int64N(64<<10)), rng.Int64N(multiGiBSize))
	}
	got, exp := make([]byte, 256<<10), make([]byte, 256<<10)
	for _, off := range offsets {
		n, err := r.ReadAt(got, off)
		if err != nil && err != io.EOF {
			t.Fatalf("pread at %d: %v", off, err)
		}
		if wantN := min(int64(len(got)), multiGiBSize-off); int64(n) != wantN {
			t.Fatalf("pread at %d returned %d bytes, want %d", off, n, wantN)
		}
		contentAt(exp[:n], off)
		if !bytes.Equal(got[:n], exp[:n]) {
			t.Fatalf("pread of %d bytes at %d differs from what was written", n, off)
		}
	}
	if st := m.Stats(); st.PeakBufferBytes > st.BufferLimit {
		t.Fatalf("buffers peaked at %d bytes, over the limit %d", st.PeakBufferBytes, st.BufferLimit)
	}
}

func fileSHA256(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, make([]byte, 1<<20)); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return h.Sum(nil)
}
