package s3fs

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// readDirect reads a whole file with O_DIRECT in 1 MiB reads, so that every read reaches the
// filesystem instead of the kernel's page cache.
func readDirect(t testing.TB, path string, size int) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	out := make([]byte, 0, size)
	buf := alignedBuffer(1 << 20)
	for {
		n, err := f.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read %s at %d: %v", path, len(out), err)
		}
	}
}

// cacheFiles returns the block files of a mount's cache and their total size, once the blocks
// written in the background are on disk.
func cacheFiles(t *testing.T, m *Mounted, cacheDir string) ([]string, int64) {
	t.Helper()
	settle(m.fs.cache)
	ents, err := os.ReadDir(filepath.Join(cacheDir, cacheSubdir))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	var total int64
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Join(cacheDir, cacheSubdir, e.Name()))
		total += info.Size()
	}
	return paths, total
}

// etagOf returns the ETag of an object.
func etagOf(t *testing.T, s *testenv.S3, key string) string {
	t.Helper()
	out, err := s.RootClient().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("head %s: %v", key, err)
	}
	return aws.ToString(out.ETag)
}

func cachedOptions(s *testenv.S3, cacheDir string) mountargs.Options {
	opts := baseOptions(s)
	opts.CacheDir = cacheDir
	opts.MetadataTTL = &mountargs.TTL{Duration: time.Second}
	return opts
}

func TestCacheServesRereadsWithoutGETs(t *testing.T) {
	s := testenv.StartS3(t)
	const size = 20<<20 + 12345
	data := pattern(size, 21)
	putObject(t, s, "reread.bin", data)
	cacheDir := t.TempDir()
	dir, m := mountFS(t, s, cachedOptions(s, cacheDir), 30*time.Second)
	path := filepath.Join(dir, "reread.bin")

	const blocks = (size + cacheBlockSize - 1) / cacheBlockSize
	// Buffered: read-ahead window parts go through the cache.
	if !bytes.Equal(readWhole(t, path), data) {
		t.Fatal("first read differs from the object")
	}
	if files, _ := cacheFiles(t, m, cacheDir); len(files) < blocks/2 {
		t.Fatalf("a buffered read of %d blocks cached %d", blocks, len(files))
	}
	// A read-ahead part canceled by its window leaves its last block out: one more read fills
	// such gaps.
	if !bytes.Equal(readDirect(t, path, size), data) {
		t.Fatal("second read differs from the object")
	}
	before := m.Stats().ReadRequests
	if !bytes.Equal(readDirect(t, path, size), data) {
		t.Fatal("reread differs from the object")
	}
	if got := m.Stats().ReadRequests - before; got != 0 {
		t.Fatalf("reread past the kernel's page cache sent %d GETs, want 0 (served from the disk cache)", got)
	}
	if files, _ := cacheFiles(t, m, cacheDir); len(files) != blocks {
		t.Fatalf("cache holds %d block files, want %d", len(files), blocks)
	}

	// Random unaligned reads are served from cached blocks too.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 3<<20)
	for _, off := range []int64{0, 1<<20 - 7, 5<<20 + 4099, size - 5000} {
		n, err := f.ReadAt(buf, off)
		if (err != nil && err != io.EOF) || !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
			t.Fatalf("pread at %d: %d bytes, %v, or other bytes", off, n, err)
		}
	}
	if got := m.Stats().ReadRequests - before; got != 0 {
		t.Fatalf("cached random reads sent %d GETs, want 0", got)
	}
}

func TestCacheNeverServesAReplacedObject(t *testing.T) {
	s := testenv.StartS3(t)
	const size = 3<<20 + 100
	v1, v2 := pattern(size, 22), pattern(size, 23)
	putObject(t, s, "replaced.bin", v1)
	dir, _ := mountFS(t, s, cachedOptions(s, t.TempDir()), 30*time.Second)
	path := filepath.Join(dir, "replaced.bin")
	if !bytes.Equal(readDirect(t, path, size), v1) {
		t.Fatal("first read differs from the object")
	}
	// Same key and size, another ETag.
	putObject(t, s, "replaced.bin", v2)
	time.Sleep(1100 * time.Millisecond) // past the metadata TTL
	if !bytes.Equal(readDirect(t, path, size), v2) {
		t.Fatal("read after the object was replaced returned cached content of the old version")
	}
	if !bytes.Equal(readWhole(t, path), v2) {
		t.Fatal("buffered read after the object was replaced differs")
	}
}

func TestCacheStaysWithinMaxCacheSize(t *testing.T) {
	s := testenv.StartS3(t)
	const size = 16 << 20
	data := pattern(size, 24)
	putObject(t, s, "big.bin", data)
	cacheDir := t.TempDir()
	opts := cachedOptions(s, cacheDir)
	opts.MaxCacheSize = ptr[uint64](3)
	dir, m := mountFS(t, s, opts, 30*time.Second)
	path := filepath.Join(dir, "big.bin")
	for i := range 2 {
		if !bytes.Equal(readDirect(t, path, size), data) {
			t.Fatalf("read %d differs from the object", i)
		}
		files, total := cacheFiles(t, m, cacheDir)
		if total > 3<<20 || len(files) == 0 {
			t.Fatalf("after reading %d MiB the cache holds %d files of %d bytes; want some, at most 3 MiB", size>>20, len(files), total)
		}
	}
}

func TestCacheRefetchesACorruptedBlockFile(t *testing.T) {
	s := testenv.StartS3(t)
	const size = 4 << 20
	data := pattern(size, 25)
	putObject(t, s, "corrupt.bin", data)
	cacheDir := t.TempDir()
	dir, m := mountFS(t, s, cachedOptions(s, cacheDir), 30*time.Second)
	path := filepath.Join(dir, "corrupt.bin")
	for range 2 { // the second read fills what a canceled read-ahead part left out
		if !bytes.Equal(readDirect(t, path, size), data) {
			t.Fatal("first read differs from the object")
		}
	}
	// Blocks 0 and 2: not adjacent, so each is refetched with a GET of its own.
	obj := cacheObject{key: "corrupt.bin", etag: etagOf(t, s, "corrupt.bin"), size: size}
	c := m.fs.cache
	settle(c)
	c.mu.Lock()
	first, third := c.index[blockIDOf(obj, 0)], c.index[blockIDOf(obj, 2)]
	c.mu.Unlock()
	if first == nil || third == nil {
		t.Fatal("blocks 0 and 2 are not cached after a read of the whole object")
	}
	flipByte(t, first.path, c.header()+12345)
	mustDo(t, os.Truncate(third.path, c.header()+100))
	before := m.Stats().ReadRequests
	if !bytes.Equal(readDirect(t, path, size), data) {
		t.Fatal("read after the cache was damaged differs from the object")
	}
	if got := m.Stats().ReadRequests - before; got != 2 {
		t.Fatalf("read over two damaged block files sent %d GETs, want 2", got)
	}
}

func TestCacheDirectoryLivesAsLongAsTheMount(t *testing.T) {
	s := testenv.StartS3(t)
	requireFUSE(t)
	cacheDir := t.TempDir()
	stale := filepath.Join(cacheDir, cacheSubdir, "stale")
	mustDo(t, os.MkdirAll(filepath.Dir(stale), 0o700))
	mustDo(t, os.WriteFile(stale, []byte("left by a crashed mount"), 0o600))
	mount := func(opts mountargs.Options) (string, *Mounted, error) {
		cfg := Config{
			Options:     opts,
			Credentials: credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
			Log:         logr.Discard(),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dir := t.TempDir()
		m, err := Mount(ctx, dir, cfg)
		return dir, m, err
	}

	dir, m, err := mount(cachedOptions(s, cacheDir))
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	_, statErr := os.Stat(stale)
	unmountFS(t, dir, m)
	if !os.IsNotExist(statErr) {
		t.Fatalf("stale cache file after mount: %v, want it removed", statErr)
	}
	if _, err := os.Stat(filepath.Join(cacheDir, cacheSubdir)); !os.IsNotExist(err) {
		t.Fatalf("cache directory after unmount: %v, want it removed", err)
	}

	if dir, m, err := mount(cachedOptions(s, filepath.Join(cacheDir, "missing"))); err == nil {
		unmountFS(t, dir, m)
		t.Fatal("mounted with a missing cache directory")
	}
}

func TestCacheChangesTheDefaultMetadataTTL(t *testing.T) {
	tests := []struct {
		name string
		opts mountargs.Options
		want time.Duration
	}{
		{name: "without a cache metadata is trusted a second", want: time.Second},
		{name: "with a cache metadata is trusted a minute", opts: mountargs.Options{CacheDir: "/c"}, want: time.Minute},
		{
			name: "an explicit metadata TTL wins over the cache's default",
			opts: mountargs.Options{CacheDir: "/c", MetadataTTL: &mountargs.TTL{Duration: 5 * time.Second}},
			want: 5 * time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFilesystem(nil, &Config{Options: tc.opts})
			defer f.stop()
			if f.ttl != tc.want {
				t.Fatalf("metadata TTL %v, want %v", f.ttl, tc.want)
			}
		})
	}
}
