package s3fs

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// readWhole reads path through a fresh descriptor.
func readWhole(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

func TestRereadIsServedFromPageCacheUntilTheObjectChanges(t *testing.T) {
	s := testenv.StartS3(t)
	const size = 4 << 20
	v1, v2 := pattern(size, 11), pattern(size, 12)
	putObject(t, s, "cached.bin", v1)
	opts := baseOptions(s)
	opts.MetadataTTL = &mountargs.TTL{Duration: time.Second}
	dir, m := mountFS(t, s, opts, 30*time.Second)
	path := filepath.Join(dir, "cached.bin")

	if !bytes.Equal(readWhole(t, path), v1) {
		t.Fatal("first read differs from the object")
	}
	before := m.Stats().ReadRequests
	if !bytes.Equal(readWhole(t, path), v1) {
		t.Fatal("second read differs from the object")
	}
	if got := m.Stats().ReadRequests; got != before {
		t.Fatalf("rereading an unchanged object sent %d GETs, want 0 (kernel page cache kept)", got-before)
	}

	// Replaced by another client, same size: the pages of v1 must not be served again.
	putObject(t, s, "cached.bin", v2)
	time.Sleep(1100 * time.Millisecond) // past the metadata TTL
	if !bytes.Equal(readWhole(t, path), v2) {
		t.Fatal("read after the object was replaced returned the old content")
	}
	if !bytes.Equal(readWhole(t, path), v2) {
		t.Fatal("second read of the replaced object differs")
	}
}

func TestRandomReadsFetchOnlyWhatTheyRead(t *testing.T) {
	const size = 64 << 20
	data := pattern(size, 13)
	f, m := openDirect(t, "random.bin", data, 0)
	buf := alignedBuffer(4096)
	rng := rand.New(rand.NewPCG(5, 6))
	const reads = 300
	for range reads {
		off := int64(rng.IntN(size/4096)) * 4096
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if !bytes.Equal(buf, data[off:off+4096]) {
			t.Fatalf("read at %d differs", off)
		}
	}
	st := m.Stats()
	if st.ReadBytes != reads*4096 || st.ReadRequests != reads {
		t.Fatalf("%d random 4 KiB reads fetched %d bytes in %d GETs, want %d bytes in %d (no prefetch)",
			reads, st.ReadBytes, st.ReadRequests, reads*4096, reads)
	}
}

func TestConcurrentOutOfOrderSequentialReads(t *testing.T) {
	const size = 48<<20 + 777
	data := pattern(size, 14)
	f, m := openDirect(t, "ooo.bin", data, 4<<20)
	// Four readers take consecutive 1 MiB chunks from a shared cursor, as the kernel's
	// readahead requests reach the filesystem: in order, but served in any order.
	const chunk = 1 << 20
	var (
		mu     sync.Mutex
		cursor int64
		wg     sync.WaitGroup
	)
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			buf := alignedBuffer(chunk)
			for {
				mu.Lock()
				off := cursor
				cursor += chunk
				mu.Unlock()
				if off >= size {
					return
				}
				n, err := f.ReadAt(buf, off)
				if err != nil && err != io.EOF {
					errs <- err
					return
				}
				if !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
					errs <- io.ErrUnexpectedEOF
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("reader: %v", err)
	}
	// Reads served from the window fetch each byte once; the first reads go straight to S3 and
	// a few overtaken ones may too.
	if st := m.Stats(); st.ReadBytes > size+16*chunk {
		t.Fatalf("reading %d bytes fetched %d", size, st.ReadBytes)
	}
}

// TestStragglingReadsKeepTheWindow: requests of a sequential stream reach the filesystem after
// the stream went more than the slack past them (their threads were descheduled): each is served
// on its own and the window, with the parts already fetched ahead, stays. Two stragglers in a
// row are two requests late, not a reader that moved.
func TestStragglingReadsKeepTheWindow(t *testing.T) {
	for _, late := range [][]int64{{5}, {5, 6}, {6, 5}, {3, 5, 4}} {
		t.Run(fmt.Sprint(late), func(t *testing.T) {
			const size = 48 << 20
			data := pattern(size, 15)
			f, m := openDirect(t, "straggler.bin", data, 4<<20)
			const chunk = 1 << 20
			// The late chunks are read after chunk 13: 8 MiB or more behind the stream, past
			// the part that held them.
			var order []int64
			for i := range int64(size / chunk) {
				if !slices.Contains(late, i) {
					order = append(order, i)
				}
				if i == 13 {
					order = append(order, late...)
				}
			}
			buf := alignedBuffer(chunk)
			for _, i := range order {
				n, err := f.ReadAt(buf, i*chunk)
				if err != nil && err != io.EOF {
					t.Fatalf("read chunk %d: %v", i, err)
				}
				if !bytes.Equal(buf[:n], data[i*chunk:i*chunk+int64(n)]) {
					t.Fatalf("chunk %d: wrong bytes", i)
				}
			}
			// Each straggler costs its own 1 MiB; a reset window would cost the parts it had
			// fetched ahead.
			if st := m.Stats(); st.ReadBytes > size+int64(len(late)+1)*chunk {
				t.Fatalf("reading %d bytes with stragglers %v fetched %d (%d more)", size, late, st.ReadBytes, st.ReadBytes-size)
			}
		})
	}
}

// openDirect stores data as the object name of a new bucket, mounts the bucket with read parts of
// partSize bytes (0: the default) and opens the file with O_DIRECT, so every read reaches the
// filesystem as asked, without the kernel's readahead.
func openDirect(t *testing.T, name string, data []byte, partSize uint64) (*os.File, *Mounted) {
	t.Helper()
	s := testenv.StartS3(t)
	putObject(t, s, name, data)
	opts := baseOptions(s)
	if partSize > 0 {
		opts.ReadPartSize = &partSize
	}
	dir, m := mountFS(t, s, opts, 30*time.Second)
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f, m
}

// alignedBuffer returns n bytes aligned for O_DIRECT.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0]))%4096)) % 4096
	return b[off : off+n]
}

func TestSequentialReadsReleaseTheirBuffers(t *testing.T) {
	s := testenv.StartS3(t)
	const size = 40 << 20
	data := pattern(size, 15)
	putObject(t, s, "seq.bin", data)
	opts := baseOptions(s)
	opts.ReadPartSize = ptr[uint64](2 << 20)
	dir, m := mountFS(t, s, opts, 30*time.Second)
	path := filepath.Join(dir, "seq.bin")
	for i := range 3 {
		// Buffered: the kernel's concurrent readahead requests are answered from part buffers.
		if got := readWhole(t, path); !bytes.Equal(got, data) {
			t.Fatalf("read %d differs", i)
		}
		// A partial read closes the file while parts are still downloading.
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(f, make([]byte, 5<<20)); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	testenv.Eventually(t, 10*time.Second, "every buffer back in the budget", func() bool { return m.Stats().BufferBytes == 0 })
	if st := m.Stats(); st.PeakBufferBytes == 0 {
		t.Fatal("sequential reads never used the read-ahead window")
	}
}
