package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/testenv"
)

const (
	objectSize = 256 << 20
	listFiles  = 10000
	randomOps  = 2000
)

// BenchmarkClients prints, per client, sequential read and write MB/s, random 4 KiB read IOPS,
// the time to list 10,000 files and the client's peak RSS so far (VmHWM, growing along the
// sub-benchmarks); raw parallel GET and multipart PUT are the ceilings. Sequential reads also report the CPU the
// client (cpu-ms/GiB) and the reading process (app-cpu-ms/GiB) spent per GiB.
func BenchmarkClients(b *testing.B) {
	requireTools(b)
	s := testenv.StartS3(b)
	seed(b, s)
	mounter := buildMounter(b)
	b.Run("raw-sdk/seq-read", func(b *testing.B) {
		b.SetBytes(objectSize)
		cpu := selfCPU()
		for range b.N {
			rawGet(b, s)
		}
		reportCPU(b, selfCPU()-cpu, "cpu-ms/GiB")
	})
	b.Run("raw-sdk/seq-write", func(b *testing.B) {
		b.SetBytes(objectSize)
		cpu := selfCPU()
		for i := range b.N {
			rawPut(b, s, fmt.Sprintf("raw-out-%d.bin", i))
		}
		reportCPU(b, selfCPU()-cpu, "cpu-ms/GiB")
	})
	for _, c := range clients(mounter) {
		b.Run(c.name, func(b *testing.B) {
			m := startClient(b, c, s)
			b.Run("seq-read", func(b *testing.B) {
				b.SetBytes(objectSize)
				cpu, app := m.cpuSeconds(), selfCPU()
				for range b.N {
					readAll(b, filepath.Join(m.dir, "big.bin"))
				}
				reportCPU(b, m.cpuSeconds()-cpu, "cpu-ms/GiB")
				// The reading process's own CPU: the kernel's page-cache work for FUSE reads,
				// which a raw GET does not pay.
				reportCPU(b, selfCPU()-app, "app-cpu-ms/GiB")
				b.ReportMetric(m.peakRSS(), "peakRSS-MiB")
			})
			b.Run("seq-write", func(b *testing.B) {
				b.SetBytes(objectSize)
				cpu, app := m.cpuSeconds(), selfCPU()
				for i := range b.N {
					writeFile(b, filepath.Join(m.dir, fmt.Sprintf("out-%s-%d.bin", c.name, i)))
				}
				reportCPU(b, m.cpuSeconds()-cpu, "cpu-ms/GiB")
				reportCPU(b, selfCPU()-app, "app-cpu-ms/GiB")
				b.ReportMetric(m.peakRSS(), "peakRSS-MiB")
			})
			b.Run("random-4k", func(b *testing.B) {
				for range b.N {
					start := time.Now()
					randomReads(b, filepath.Join(m.dir, "big.bin"))
					b.ReportMetric(randomOps/time.Since(start).Seconds(), "IOPS")
				}
				b.ReportMetric(m.peakRSS(), "peakRSS-MiB")
			})
			b.Run("list-10000", func(b *testing.B) {
				for range b.N {
					if entries, err := os.ReadDir(filepath.Join(m.dir, "many")); err != nil || len(entries) != listFiles {
						b.Fatalf("listed %d: %v", len(entries), err)
					}
				}
				b.ReportMetric(m.peakRSS(), "peakRSS-MiB")
			})
		})
	}
}

// seed stores the test data straight in the posix backend.
func seed(b *testing.B, s *testenv.S3) {
	root := filepath.Join(s.Dir, s.Bucket)
	f, err := os.Create(filepath.Join(root, "big.bin"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.NewChaCha8([32]byte{1}), objectSize); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "many"), 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range listFiles {
		if err := os.WriteFile(filepath.Join(root, "many", fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// readAll reads path once from the client, not from the kernel's page cache: pages left by an
// earlier iteration are dropped first (a client may keep them across opens).
func readAll(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatalf("drop cached pages of %s: %v", path, err)
	}
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, make([]byte, 1<<20))
	if err != nil || n != objectSize {
		b.Fatalf("read %d bytes of %s: %v", n, path, err)
	}
}

func writeFile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for range objectSize / len(buf) {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

func randomReads(b *testing.B, path string) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 4096)
	for range randomOps {
		if _, err := f.ReadAt(buf, int64(rng.IntN(objectSize/4096))*4096); err != nil {
			b.Fatal(err)
		}
	}
}

// reportCPU reports CPU time per GiB read: on a machine whose cores are shared, throughput
// varies with the load while the CPU a client spends per byte does not.
func reportCPU(b *testing.B, seconds float64, unit string) {
	b.ReportMetric(seconds*1000/(float64(b.N)*objectSize/(1<<30)), unit)
}

// selfCPU is the CPU time this process has used, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// rawPut uploads objectSize bytes as a multipart upload of 8 MiB parts, 8 at a time: the
// write ceiling, the way the mounter itself uploads.
func rawPut(b *testing.B, s *testenv.S3, key string) {
	c := s.RootClient()
	const part = 8 << 20
	data := make([]byte, part)
	ctx := context.Background()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
	if err != nil {
		b.Fatal(err)
	}
	done := make([]types.CompletedPart, objectSize/part)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range done {
		g.Go(func() error {
			out, err := c.UploadPart(gctx, &s3.UploadPartInput{
				Bucket: aws.String(s.Bucket), Key: aws.String(key), UploadId: up.UploadId,
				PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(data), ContentLength: aws.Int64(part), //nolint:gosec // 32 parts
			})
			if err != nil {
				return err
			}
			done[i] = types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag} //nolint:gosec // 32 parts
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.Bucket), Key: aws.String(key), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done},
	}); err != nil {
		b.Fatal(err)
	}
}

func rawGet(b *testing.B, s *testenv.S3) {
	c := s.RootClient()
	const part = 8 << 20
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(16)
	for off := 0; off < objectSize; off += part {
		g.Go(func() error {
			out, err := c.GetObject(ctx, &s3.GetObjectInput{
				Bucket: aws.String(s.Bucket), Key: aws.String("big.bin"),
				Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+part-1)),
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
