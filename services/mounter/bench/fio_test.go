package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// The data every client reads, seeded once in the S3 server's posix root: bigFiles objects of
// objectSize (one per fio job of the four-job reads) and smallFiles objects of smallSize.
const (
	bigFiles   = 4
	smallFiles = 40
	smallSize  = 5 << 20
)

// fioJob is one of the job shapes mountpoint-s3 publishes its benchmark results with: 256 KiB
// blocks, the sync engine, no preallocation. Every job moves a fixed amount of data instead of
// running for a fixed time, so that each object is read once: the kernel's cached pages of the
// files are dropped before the job, and no job reads an object twice.
type fioJob struct {
	name string
	// args are the job's own options; fioArgs adds the common ones.
	args []string
	// files are the names, in the mount, that the job reads (their cached pages are dropped).
	files []string
	// write is set for a job that writes: its figures come from fio's write side.
	write bool
	// bytes is what the job must move; fio moving less fails the benchmark.
	bytes int64
	// latency reports completion latency percentiles instead of throughput.
	latency bool
}

func fioJobs() []fioJob {
	bigs := func(n int) []string {
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("big.%d.0", i))
		}
		return names
	}
	var smalls []string
	for i := range smallFiles {
		smalls = append(smalls, fmt.Sprintf("small.0.%d", i))
	}
	size := strconv.Itoa(objectSize)
	seq := func(name string, jobs int, direct bool) fioJob {
		args := []string{"--rw=read", "--filename_format=big.$jobnum.0", "--size=" + size, "--numjobs=" + strconv.Itoa(jobs)}
		if direct {
			args = append(args, "--direct=1")
		}
		return fioJob{name: name, args: args, files: bigs(jobs), bytes: int64(jobs) * objectSize}
	}
	return []fioJob{
		seq("seq-read", 1, false),
		seq("seq-read-4t", bigFiles, false),
		seq("seq-read-direct", 1, true),
		seq("seq-read-4t-direct", bigFiles, true),
		// fio's random map makes each block of the object read exactly once, in random order.
		{name: "rand-read", args: []string{"--rw=randread", "--filename_format=big.$jobnum.0", "--size=" + size},
			files: bigs(1), bytes: objectSize},
		// 40 objects of 5 MiB, one open at a time, each read to its end before the next.
		{name: "small-files", args: []string{"--rw=read", "--filename_format=small.$jobnum.$filenum",
			"--nrfiles=" + strconv.Itoa(smallFiles), "--filesize=" + strconv.Itoa(smallSize),
			"--size=" + strconv.Itoa(smallFiles*smallSize), "--file_service_type=sequential", "--openfiles=1"},
			files: smalls, bytes: smallFiles * smallSize},
		// Time to first byte: one byte of each of the 40 objects with O_DIRECT, the files opened
		// before the timed reads (fio's completion latency, as mountpoint-s3 measures it).
		{name: "ttfb", args: []string{"--rw=read", "--bs=1", "--direct=1", "--filename_format=small.$jobnum.$filenum",
			"--nrfiles=" + strconv.Itoa(smallFiles), "--size=" + strconv.Itoa(smallFiles)},
			files: smalls, bytes: smallFiles, latency: true},
		// A new file written to its end, fsync'd and closed (the upload), then unlinked.
		{name: "seq-write", args: []string{"--rw=write", "--filename_format=write.$jobnum.0", "--size=" + size,
			"--create_on_open=1", "--fsync_on_close=1", "--unlink=1"},
			write: true, bytes: objectSize},
	}
}

// fioResult is what a job measured.
type fioResult struct {
	mbps          float64 // MB/s as fio counts it: bytes over the job's run time
	p50ms, p99ms  float64 // completion latency percentiles
	appCPUSeconds float64 // the jobs' CPU (user and system) while they ran
	bytes         int64
	fioErrorCode  int
}

// runFio runs job once against dir and returns fio's figures; fio failing, or moving less than
// the job's bytes, fails the benchmark.
func runFio(b *testing.B, job fioJob, dir string) fioResult {
	b.Helper()
	for _, name := range job.files {
		dropCachedPages(b, filepath.Join(dir, name))
	}
	out := filepath.Join(b.TempDir(), "fio.json")
	args := append([]string{"--name=" + job.name, "--directory=" + dir, "--ioengine=sync", "--bs=256k",
		"--fallocate=none", "--thread", "--group_reporting", "--output-format=json", "--output=" + out}, job.args...)
	cmd := exec.Command("fio", args...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Run(); err != nil {
		b.Fatalf("fio %s: %v\n%s", job.name, err, logs.String())
	}
	r, err := parseFio(out, job.write)
	if err != nil {
		b.Fatalf("fio %s: %v\n%s", job.name, err, logs.String())
	}
	if r.fioErrorCode != 0 || r.bytes != job.bytes {
		b.Fatalf("fio %s: error %d, moved %d of %d bytes\n%s", job.name, r.fioErrorCode, r.bytes, job.bytes, logs.String())
	}
	return r
}

// parseFio reads fio's JSON output (one job entry: the jobs are group-reported).
func parseFio(path string, write bool) (fioResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return fioResult{}, err
	}
	var doc struct {
		Jobs []struct {
			Error      int     `json:"error"`
			JobRuntime int64   `json:"job_runtime"` // ms, summed over the group's jobs
			UsrCPU     float64 `json:"usr_cpu"`     // % of JobRuntime
			SysCPU     float64 `json:"sys_cpu"`
			Read       fioIO   `json:"read"`
			Write      fioIO   `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return fioResult{}, fmt.Errorf("parse %s: %w", path, err)
	}
	if len(doc.Jobs) != 1 {
		return fioResult{}, fmt.Errorf("%d job entries in %s, want 1", len(doc.Jobs), path)
	}
	j := doc.Jobs[0]
	io := j.Read
	if write {
		io = j.Write
	}
	return fioResult{
		mbps:  float64(io.BWBytes) / 1e6,
		p50ms: io.ClatNs.Percentile["50.000000"] / 1e6,
		p99ms: io.ClatNs.Percentile["99.000000"] / 1e6,
		// The jobs' own CPU while they ran, without fio's start and end.
		appCPUSeconds: (j.UsrCPU + j.SysCPU) / 100 * float64(j.JobRuntime) / 1000,
		bytes:         io.IOBytes,
		fioErrorCode:  j.Error,
	}, nil
}

type fioIO struct {
	IOBytes int64 `json:"io_bytes"`
	BWBytes int64 `json:"bw_bytes"`
	ClatNs  struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// dropCachedPages drops the kernel's cached pages of path, so the next read goes to the client:
// a FUSE client may keep them across opens. Dropping the whole page cache instead would also
// drop the S3 server's files and measure the disk.
func dropCachedPages(b *testing.B, path string) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatalf("drop cached pages of %s: %v", path, err)
	}
}
