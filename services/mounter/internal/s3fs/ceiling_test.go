package s3fs

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/mount"

	"github.com/s3csi/s3csi/services/mounter/internal/fuseconn"
)

// memRoot serves one file, "big.bin", whose content repeats an in-memory block.
type memRoot struct {
	fs.Inode
	size  int64
	block []byte
}

func (r *memRoot) OnAdd(ctx context.Context) {
	f := &memFile{size: r.size, block: r.block}
	r.AddChild("big.bin", r.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}), false)
}

type memFile struct {
	fs.Inode
	size  int64
	block []byte
}

func (f *memFile) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode, out.Size = 0o644, uint64(f.size) //nolint:gosec // sizes are not negative
	return 0
}

func (f *memFile) Open(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, 0
}

// Read answers with a slice of the block, without copying, as the reader answers from a part;
// a read across the block's end is copied (a short reply would mean end of file).
func (f *memFile) Read(_ context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	bs := int64(len(f.block))
	n := min(int64(len(dest)), max(f.size-off, 0))
	if o := off % bs; o+n <= bs {
		return fuse.ReadResultData(f.block[o : o+n]), 0
	}
	for i := int64(0); i < n; {
		i += int64(copy(dest[i:n], f.block[(off+i)%bs:]))
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// BenchmarkFUSECeiling reads a file served from memory through a FUSE mount with the mounter's
// options and readahead: what a sequential reader of any FUSE filesystem gets on this machine,
// without S3. The two sub-benchmarks serve the same filesystem with go-fuse's own request loop
// and with fuseconn's, which the mounter uses. Compare with BenchmarkRawParallelGET run at the
// same time.
func BenchmarkFUSECeiling(b *testing.B) {
	requireFUSE(b)
	size := benchSize(b)
	f := &filesystem{bucket: "ceiling"}
	ttl := defaultMetadataTTL
	newRoot := func() fs.InodeEmbedder { return &memRoot{size: int64(size), block: pattern(8<<20, 7)} }
	b.Run("loop=go-fuse", func(b *testing.B) {
		dir := b.TempDir()
		opts := f.mountOptions()
		opts.DirectMount, opts.AllowOther = true, true
		server, err := fs.Mount(dir, newRoot(), &fs.Options{MountOptions: opts, EntryTimeout: &ttl, AttrTimeout: &ttl})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := server.Unmount(); err != nil {
				b.Errorf("unmount %s: %v", dir, err)
			}
		})
		readCeiling(b, dir, size)
	})
	b.Run("loop=fuseconn", func(b *testing.B) {
		dir := b.TempDir()
		dev, err := mount.FUSE(dir, false)
		if err != nil {
			b.Fatal(err)
		}
		opts := f.mountOptions()
		raw := fs.NewNodeFS(newRoot(), &fs.Options{EntryTimeout: &ttl, AttrTimeout: &ttl})
		conn, err := fuseconn.Serve(int(dev.Fd()), raw, &opts, fuseconn.Options{})
		if err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := unix.Unmount(dir, 0); err != nil {
				b.Errorf("unmount %s: %v", dir, err)
			}
			_ = conn.Wait()
			_ = dev.Close()
		})
		disablePoll(dir, logr.Discard())
		readCeiling(b, dir, size)
	})
}

func readCeiling(b *testing.B, dir string, size int) {
	b.Helper()
	if err := mount.SetReadAhead(dir, mount.FUSEReadAheadKiB); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		file, err := os.Open(filepath.Join(dir, "big.bin"))
		if err != nil {
			b.Fatal(err)
		}
		if err := unix.Fadvise(int(file.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{file}, buf)
		_ = file.Close()
		if err != nil || n != int64(size) {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}
}
