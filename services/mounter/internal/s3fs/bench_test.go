package s3fs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sync/errgroup"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// benchSize is the object size of the throughput benchmarks: S3CSI_BENCH_SIZE_MIB, default 256.
func benchSize(b *testing.B) int {
	mib := 256
	if v := os.Getenv("S3CSI_BENCH_SIZE_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("S3CSI_BENCH_SIZE_MIB=%q: want a positive integer", v)
		}
		mib = n
	}
	return mib << 20
}

// reportRSS reports the process's peak resident set (the filesystem runs in-process).
func reportRSS(b *testing.B) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		b.ReportMetric(float64(ru.Maxrss)/1024, "peakRSS-MiB")
	}
}

// storeFile puts an object of size bytes straight into the posix backend.
func storeFile(b *testing.B, s *testenv.S3, key string, size int) {
	b.Helper()
	f, err := os.Create(filepath.Join(s.Dir, s.Bucket, key))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	// Streamed, so that the benchmark's own data does not count in the peak RSS.
	if _, err := io.CopyN(f, rand.NewChaCha8([32]byte{9}), int64(size)); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkSequentialRead(b *testing.B) {
	s := testenv.StartS3(b)
	size := benchSize(b)
	storeFile(b, s, "seq.bin", size)
	dir, _ := mountFS(b, s, baseOptions(s), time.Minute)
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		f, err := os.Open(filepath.Join(dir, "seq.bin"))
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
		_ = f.Close()
		if err != nil || n != int64(size) {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}
	reportRSS(b)
}

func BenchmarkSequentialWrite(b *testing.B) {
	s := testenv.StartS3(b)
	size := benchSize(b)
	data := pattern(1<<20, 4)
	dir, _ := mountFS(b, s, baseOptions(s), time.Minute)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("w%d.bin", i)))
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < size; off += len(data) {
			if _, err := f.Write(data); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	reportRSS(b)
}

func BenchmarkRandomRead4KiB(b *testing.B) {
	s := testenv.StartS3(b)
	size := benchSize(b)
	storeFile(b, s, "rand.bin", size)
	dir, _ := mountFS(b, s, baseOptions(s), time.Minute)
	// O_DIRECT keeps the kernel's page cache and readahead out of the measurement.
	f, err := os.OpenFile(filepath.Join(dir, "rand.bin"), os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 4096)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		off := int64(rng.IntN(size/4096)) * 4096
		if _, err := f.ReadAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
	reportRSS(b)
}

func BenchmarkList10000Files(b *testing.B) {
	s := testenv.StartS3(b)
	root := filepath.Join(s.Dir, s.Bucket, "many")
	if err := os.MkdirAll(root, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range 10000 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	opts := baseOptions(s)
	opts.MetadataTTL = &mountargs.TTL{Duration: 0}
	dir, _ := mountFS(b, s, opts, time.Minute)
	b.ResetTimer()
	for range b.N {
		entries, err := os.ReadDir(filepath.Join(dir, "many"))
		if err != nil || len(entries) != 10000 {
			b.Fatalf("listed %d: %v", len(entries), err)
		}
	}
	reportRSS(b)
}

// BenchmarkRawParallelGET is the ceiling: 16 concurrent 8 MiB ranged GETs with the SDK.
func BenchmarkRawParallelGET(b *testing.B) {
	s := testenv.StartS3(b)
	size := benchSize(b)
	storeFile(b, s, "raw.bin", size)
	c := s.RootClient()
	const part = 8 << 20
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		g, ctx := errgroup.WithContext(context.Background())
		g.SetLimit(16)
		for off := 0; off < size; off += part {
			g.Go(func() error {
				out, err := c.GetObject(ctx, &s3.GetObjectInput{
					Bucket: aws.String(s.Bucket), Key: aws.String("raw.bin"),
					Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, min(off+part, size)-1)),
				})
				if err != nil {
					return err
				}
				defer out.Body.Close()
				_, err = io.Copy(io.Discard, out.Body)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	reportRSS(b)
}

// BenchmarkRawMultipartPUT is the ceiling for writes: 8 concurrent 8 MiB parts with the SDK.
func BenchmarkRawMultipartPUT(b *testing.B) {
	s := testenv.StartS3(b)
	size := benchSize(b)
	c := s.RootClient()
	const part = 8 << 20
	data := pattern(part, 5)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		ctx := context.Background()
		key := aws.String(fmt.Sprintf("raw%d.bin", i))
		up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: key})
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		var parts []types.CompletedPart
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(8)
		for n := int32(1); int(n-1)*part < size; n++ {
			g.Go(func() error {
				out, err := c.UploadPart(gctx, &s3.UploadPartInput{
					Bucket: aws.String(s.Bucket), Key: key, UploadId: up.UploadId, PartNumber: aws.Int32(n),
					Body: bytes.NewReader(data), ContentLength: aws.Int64(part),
				})
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: out.ETag})
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		sortParts(parts)
		if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
			Bucket: aws.String(s.Bucket), Key: key, UploadId: up.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		}); err != nil {
			b.Fatal(err)
		}
	}
	reportRSS(b)
}

func sortParts(parts []types.CompletedPart) {
	for i := 1; i < len(parts); i++ {
		for j := i; j > 0 && *parts[j].PartNumber < *parts[j-1].PartNumber; j-- {
			parts[j], parts[j-1] = parts[j-1], parts[j]
		}
	}
}

// BenchmarkRawRandomGET4KiB is the ceiling for random reads: one 4 KiB ranged GET at a time.
func BenchmarkRawRandomGET4KiB(b *testing.B) {
	s := testenv.StartS3(b)
	size := benchSize(b)
	storeFile(b, s, "rand.bin", size)
	c := s.RootClient()
	rng := rand.New(rand.NewPCG(3, 4))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		off := rng.IntN(size/4096) * 4096
		out, err := c.GetObject(context.Background(), &s3.GetObjectInput{
			Bucket: aws.String(s.Bucket), Key: aws.String("rand.bin"),
			Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+4095)),
		})
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, out.Body)
		_ = out.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
}
