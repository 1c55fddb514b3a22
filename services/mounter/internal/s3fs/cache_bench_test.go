package s3fs

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// BenchmarkCacheSequentialRead reads an object sequentially through the mount without --cache
// (nocache), with --cache on an empty cache (cold) and again from the filled cache (warm), with
// O_DIRECT reads of 1 MiB (MB/s) and with buffered reads after dropping the file's pages from
// the kernel's page cache (buf-MB/s). Each iteration mounts afresh, so every cold read starts
// with an empty cache.
func BenchmarkCacheSequentialRead(b *testing.B) {
	s := testenv.StartS3(b)
	size := benchSize(b)
	putFile(b, s, "seq.bin", size)
	cached := baseOptions(s)
	cached.CacheDir = benchCacheDir(b)
	cached.MetadataTTL = &mountargs.TTL{Indefinite: true}
	total := map[string]time.Duration{}
	for range b.N {
		d := timedReads(b, s, baseOptions(s), size, false, true)
		total["nocache-MB/s"] += d[0]
		total["nocache-buf-MB/s"] += d[1]
		d = timedReads(b, s, cached, size, false, false, true)
		total["cold-MB/s"] += d[0]
		total["warm-MB/s"] += d[1]
		total["warm-buf-MB/s"] += d[2]
		total["cold-buf-MB/s"] += timedReads(b, s, cached, size, true)[0]
	}
	for unit, d := range total {
		b.ReportMetric(float64(size)*float64(b.N)/d.Seconds()/1e6, unit)
	}
	reportRSS(b)
}

// benchCacheDir returns a directory for a benchmark's cache: in S3CSI_BENCH_CACHE_DIR when set
// (e.g. /dev/shm, to take the disk out of the figures), else in the test's temporary directory.
func benchCacheDir(b *testing.B) string {
	b.Helper()
	base := os.Getenv("S3CSI_BENCH_CACHE_DIR")
	if base == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(base, "s3csi-bench-cache")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// putFile uploads an object of size pseudo-random bytes through S3, so that it has an ETag (an
// object written straight into the posix backend has none, and bypasses the cache).
func putFile(b *testing.B, s *testenv.S3, key string, size int) {
	b.Helper()
	f, err := os.CreateTemp(b.TempDir(), "object")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.NewChaCha8([32]byte{byte(len(key))}), int64(size)); err != nil {
		b.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := s.RootClient().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String(key), Body: f, ContentLength: aws.Int64(int64(size)),
	})
	if err != nil {
		b.Fatalf("put %s: %v", key, err)
	}
	if aws.ToString(out.ETag) == "" {
		b.Fatalf("put %s: no ETag", key)
	}
}

// benchMount mounts s's bucket in a temporary directory; the caller unmounts it.
func benchMount(b *testing.B, s *testenv.S3, opts mountargs.Options) (string, *Mounted) {
	b.Helper()
	dir := b.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := Mount(ctx, dir, Config{
		Options:        opts,
		Credentials:    credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		Log:            logr.Discard(),
		RequestTimeout: time.Minute,
	})
	if err != nil {
		b.Fatalf("mount: %v", err)
	}
	return dir, m
}

// timedReads mounts with opts and times reads of seq.bin whole, one per entry of buffered:
// buffered (after dropping the file's cached pages) or with O_DIRECT.
func timedReads(b *testing.B, s *testenv.S3, opts mountargs.Options, size int, buffered ...bool) []time.Duration {
	b.Helper()
	b.StopTimer()
	dir, m := benchMount(b, s, opts)
	defer unmountFS(b, dir, m)
	b.StartTimer()
	out := make([]time.Duration, 0, len(buffered))
	buf := alignedBuffer(1 << 20)
	for _, bufd := range buffered {
		start := time.Now()
		if n := readCount(b, filepath.Join(dir, "seq.bin"), buf, bufd); n != size {
			b.Fatalf("read %d bytes of %d", n, size)
		}
		out = append(out, time.Since(start))
	}
	b.StopTimer()
	return out
}

// readCount reads a file into buf until its end and returns the bytes read: with O_DIRECT, or
// buffered after dropping the file's pages from the kernel's page cache.
func readCount(b *testing.B, path string, buf []byte, buffered bool) int {
	b.Helper()
	flags := os.O_RDONLY | syscall.O_DIRECT
	if buffered {
		flags = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		b.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	if buffered {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			b.Fatalf("drop cached pages of %s: %v", path, err)
		}
	}
	total := 0
	for {
		n, err := f.Read(buf)
		total += n
		if err == io.EOF {
			return total
		}
		if err != nil {
			b.Fatalf("read %s at %d: %v", path, total, err)
		}
	}
}

// BenchmarkCacheRandomRead4KiB reads 4 KiB at random offsets with O_DIRECT, one at a time,
// without --cache (nocache-IOPS) and from a filled cache (warm-IOPS); b.N reads each.
func BenchmarkCacheRandomRead4KiB(b *testing.B) {
	s := testenv.StartS3(b)
	size := benchSize(b)
	putFile(b, s, "rand.bin", size)
	plain := timedRandomReads(b, s, baseOptions(s), size, false, b.N)
	opts := baseOptions(s)
	opts.CacheDir = benchCacheDir(b)
	opts.MetadataTTL = &mountargs.TTL{Indefinite: true}
	warm := timedRandomReads(b, s, opts, size, true, b.N)
	b.ReportMetric(float64(b.N)/plain.Seconds(), "nocache-IOPS")
	b.ReportMetric(float64(b.N)/warm.Seconds(), "warm-IOPS")
}

// timedRandomReads mounts with opts, reads rand.bin whole first when fill is set, and times
// reads random 4 KiB reads.
func timedRandomReads(b *testing.B, s *testenv.S3, opts mountargs.Options, size int, fill bool, reads int) time.Duration {
	b.Helper()
	dir, m := benchMount(b, s, opts)
	defer unmountFS(b, dir, m)
	path := filepath.Join(dir, "rand.bin")
	if fill {
		readCount(b, path, alignedBuffer(1<<20), false)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := alignedBuffer(4096)
	rng := rand.New(rand.NewPCG(7, 8))
	start := time.Now()
	for range reads {
		off := int64(rng.IntN(size/4096)) * 4096
		if _, err := f.ReadAt(buf, off); err != nil {
			b.Fatalf("read at %d: %v", off, err)
		}
	}
	return time.Since(start)
}

// BenchmarkCacheRemoteEndpoint repeats the cache benchmarks against an endpoint that answers
// every request S3CSI_BENCH_LATENCY_MS (default 20) late, standing in for a remote S3: sequential
// O_DIRECT reads of S3CSI_BENCH_SIZE_MIB without --cache, cold and warm, and 200 random 4 KiB
// reads without --cache and warm.
func BenchmarkCacheRemoteEndpoint(b *testing.B) {
	latency := 20 * time.Millisecond
	if v := os.Getenv("S3CSI_BENCH_LATENCY_MS"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			b.Fatalf("S3CSI_BENCH_LATENCY_MS=%q: want a number of milliseconds", v)
		}
		latency = time.Duration(ms) * time.Millisecond
	}
	s := testenv.StartS3(b)
	size := benchSize(b)
	putFile(b, s, "seq.bin", size)
	putFile(b, s, "rand.bin", size)
	plain := baseOptions(s)
	plain.EndpointURL = delayedEndpoint(b, s.Endpoint, latency)
	cached := plain
	cached.CacheDir = benchCacheDir(b)
	cached.MetadataTTL = &mountargs.TTL{Indefinite: true}
	const reads = 200
	total := map[string]time.Duration{}
	for range b.N {
		total["nocache-MB/s"] += timedReads(b, s, plain, size, false)[0]
		d := timedReads(b, s, cached, size, false, false)
		total["cold-MB/s"] += d[0]
		total["warm-MB/s"] += d[1]
		total["nocache-IOPS"] += timedRandomReads(b, s, plain, size, false, reads)
		total["warm-IOPS"] += timedRandomReads(b, s, cached, size, true, reads)
	}
	for unit, d := range total {
		n := float64(size)
		if strings.HasSuffix(unit, "IOPS") {
			n = reads
		} else {
			n /= 1e6
		}
		b.ReportMetric(n*float64(b.N)/d.Seconds(), unit)
	}
}

// delayedEndpoint returns the URL of a reverse proxy to endpoint that holds every request for
// latency first.
func delayedEndpoint(b *testing.B, endpoint string, latency time.Duration) string {
	b.Helper()
	return proxyEndpoint(b, endpoint, func(*http.Request) { time.Sleep(latency) })
}

// BenchmarkDiskCacheHit measures the cache's own cost of serving a hit, without FUSE or S3:
// 4 KiB at random offsets and whole 1 MiB blocks of a cached 64 MiB object.
func BenchmarkDiskCacheHit(b *testing.B) {
	const size = 64 << 20
	for _, n := range []int{4 << 10, 1 << 20} {
		b.Run(strconv.Itoa(n>>10)+"KiB", func(b *testing.B) {
			c, err := openDiskCache(b.TempDir(), 0, cacheBlockSize)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.close() }()
			o := &fakeObject{data: pattern(size, 30)}
			obj := cacheObject{key: "k", etag: "e", size: size}
			if _, err := c.read(context.Background(), obj, make([]byte, size), 0, o.fetch, nil); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, n)
			rng := rand.New(rand.NewPCG(9, 10))
			b.SetBytes(int64(n))
			b.ResetTimer()
			for range b.N {
				off := int64(rng.IntN(size/n) * n)
				if _, err := c.read(context.Background(), obj, buf, off, o.fetch, nil); err != nil {
					b.Fatal(err)
				}
			}
			if o.gets.Load() != 1 {
				b.Fatalf("hits sent %d GETs", o.gets.Load()-1)
			}
		})
	}
}
