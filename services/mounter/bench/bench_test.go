package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sync/errgroup"

	"github.com/s3csi/s3csi/shared/testenv"
)

const (
	objectSize = 256 << 20
	listFiles  = 10000
)

// BenchmarkClients runs the fio job shapes of fioJobs through each FUSE client (MB/s, the
// median of runsPerFigure runs, or latency percentiles for the time to first byte), lists a
// directory of 10,000 files, and reports each client's CPU per GiB and peak RSS so far (VmHWM,
// growing along the sub-benchmarks). Raw parallel GET and multipart PUT with aws-sdk-go-v2 are the ceilings, and
// every client's throughput is also reported as a percentage of them. The S3 server and the
// clients run on separate CPUs where the machine has more than one, and the machine's free
// memory is touched once first and kept backed (see touchFreeMemory).
func BenchmarkClients(b *testing.B) {
	requireTools(b)
	keepFreedPages(b)
	touchFreeMemory(b)
	s := testenv.StartS3(b)
	seed(b, s)
	mounter := buildMounter(b)
	pinCores(b, s.Pid())
	var rawGetMBps, rawPutMBps float64
	b.Run("raw-sdk/seq-read", func(b *testing.B) {
		rawGetMBps = rawCeiling(b, func(int) { rawGet(b, s) })
	})
	b.Run("raw-sdk/seq-write", func(b *testing.B) {
		rawPutMBps = rawCeiling(b, func(i int) { rawPut(b, s, fmt.Sprintf("raw-out-%d.bin", i)) })
	})
	for _, c := range clients(mounter) {
		b.Run(c.name, func(b *testing.B) {
			m := startClient(b, c, s)
			for _, job := range fioJobs() {
				b.Run(job.name, func(b *testing.B) {
					var mbps, p50, p99 []float64
					var clientCPU, appCPU float64
					for range b.N * runsPerFigure {
						cpu := m.cpuSeconds()
						r := runFio(b, job, m.dir)
						clientCPU += m.cpuSeconds() - cpu
						appCPU += r.appCPUSeconds
						mbps, p50, p99 = append(mbps, r.mbps), append(p50, r.p50ms), append(p99, r.p99ms)
					}
					if job.latency {
						b.ReportMetric(median(p50), "p50-ms")
						b.ReportMetric(median(p99), "p99-ms")
					} else {
						raw := rawGetMBps
						if job.write {
							raw = rawPutMBps
						}
						b.ReportMetric(median(mbps), "MB/s")
						b.ReportMetric(slices.Min(mbps), "min-MB/s")
						if raw > 0 { // the ceilings ran: not filtered out by -bench
							b.ReportMetric(100*median(mbps)/raw, "%raw")
						}
						moved := float64(len(mbps)) * float64(job.bytes)
						reportCPU(b, clientCPU, moved, "cpu-ms/GiB")
						// The reading or writing process's own CPU: for a FUSE client, the
						// kernel's page-cache work, which a raw GET does not pay.
						reportCPU(b, appCPU, moved, "app-cpu-ms/GiB")
					}
					b.ReportMetric(m.peakRSS(), "peakRSS-MiB")
				})
			}
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

// seed stores the test data straight in the posix backend: the objects fioJobs reads (random
// bytes, so no layer can compress them) and a directory of listFiles empty objects.
func seed(b *testing.B, s *testenv.S3) {
	root := filepath.Join(s.Dir, s.Bucket)
	rng := rand.NewChaCha8([32]byte{1})
	write := func(name string, size int64) {
		f, err := os.Create(filepath.Join(root, name))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyN(f, rng, size); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	write("big.bin", objectSize) // the raw GET's object
	for i := range bigFiles {
		write(fmt.Sprintf("big.%d.0", i), objectSize)
	}
	for i := range smallFiles {
		write(fmt.Sprintf("small.0.%d", i), smallSize)
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

// runsPerFigure is how many times each transfer runs per benchmark iteration: the figure is
// their median, so that one run slowed by the machine does not make it.
const runsPerFigure = 3

// rawCeiling runs transfer (objectSize bytes) runsPerFigure times per iteration and reports
// the median MB/s, which it returns, and the CPU per GiB.
func rawCeiling(b *testing.B, transfer func(i int)) float64 {
	var mbps []float64
	cpu := selfCPU()
	for i := range b.N * runsPerFigure {
		start := time.Now()
		transfer(i)
		mbps = append(mbps, objectSize/1e6/time.Since(start).Seconds())
	}
	b.ReportMetric(median(mbps), "MB/s")
	b.ReportMetric(slices.Min(mbps), "min-MB/s")
	reportCPU(b, selfCPU()-cpu, float64(len(mbps))*objectSize, "cpu-ms/GiB")
	return median(mbps)
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// reportCPU reports CPU time per GiB moved: on a machine whose cores are shared, throughput
// varies with the load while the CPU a client spends per byte does not.
func reportCPU(b *testing.B, seconds, bytes float64, unit string) {
	b.ReportMetric(seconds*1000/(bytes/(1<<30)), unit)
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
