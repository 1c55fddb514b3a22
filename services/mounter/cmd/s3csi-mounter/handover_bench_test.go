package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

// handovers is how many times one op of BenchmarkMounterReplacement replaces the mounter.
const handovers = 20

// BenchmarkMounterReplacement measures the pause a workload sees when the mounter serving its mount
// is replaced, in both ways it ends: killed (SIGKILL; the next mounter starts in the same comm
// dir, as kubelet restarts the container) and handed over (SIGTERM; the next mounter runs in a
// new comm dir, as in the pod that replaces a deleted one). A reader opens, reads and closes a
// small file in a loop (each open is a request the server must answer); each op replaces the
// mounter 20 times under it and reports the p50 and p99 of the reader's longest open-read-close
// across each replacement (pause-p50-ms, pause-p99-ms) and of Keep's own measure, from the end of
// one mounter to the next serving (takeover-p50-ms, takeover-p99-ms). The next mounter is forked
// before the previous one ends, so the figures leave out the container start kubelet adds.
func BenchmarkMounterReplacement(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("this benchmark mounts /dev/fuse: run it as root")
	}
	s := testenv.StartS3(b)
	if _, err := s.RootClient().PutObject(b.Context(), &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("small.txt"), Body: stringsReader("0123456789abcdef"),
	}); err != nil {
		b.Fatal(err)
	}
	bin := buildWorldExecutable(b)
	for _, tc := range []struct {
		name     string
		signal   syscall.Signal
		handover bool
	}{
		{"killed", syscall.SIGKILL, false},
		{"handed-over", syscall.SIGTERM, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var pauses, takeovers []time.Duration
			for b.Loop() {
				p, k := replaceRepeatedly(b, s, bin, tc.signal, tc.handover)
				pauses, takeovers = append(pauses, p...), append(takeovers, k...)
			}
			b.ReportMetric(msAt(pauses, 50), "pause-p50-ms")
			b.ReportMetric(msAt(pauses, 99), "pause-p99-ms")
			b.ReportMetric(msAt(takeovers, 50), "takeover-p50-ms")
			b.ReportMetric(msAt(takeovers, 99), "takeover-p99-ms")
		})
	}
}

// replaceRepeatedly mounts the bucket, then replaces its mounter handovers times under a reader
// and returns the reader's longest operation across each replacement and Keep's takeover times.
func replaceRepeatedly(b *testing.B, s *testenv.S3, bin string, signal syscall.Signal, handover bool) (pauses, takeovers []time.Duration) {
	b.Helper()
	pod := startPodMounter(b, bin, "")
	var nextSock atomic.Pointer[string]
	resumed := make(chan handshake.Resumption, 1)
	opts := handshake.KeepOptions{Log: logr.Discard(), Resumed: func(r handshake.Resumption) { resumed <- r }}
	if handover {
		opts.Next = func(context.Context, bool) (string, error) { return *nextSock.Load(), nil }
	}
	source, kept := pod.keep(b.Context(), b, true, pod.bucketRequest(b, s, "--force-path-style", "--read-only"), opts)
	defer kept.Close()

	reader := &longestOp{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() { reader.loop(filepath.Join(source, "small.txt"), stop) })

	for i := range handovers {
		dir := pod.commDir
		if handover {
			dir = filepath.Join(b.TempDir(), fmt.Sprintf("comm-%d", i))
			if err := os.Mkdir(dir, 0o750); err != nil {
				b.Fatal(err)
			}
			nextSock.Store(ptr(filepath.Join(dir, mppod.MountSockName)))
		}
		next, start := standbyPodMounter(b, bin, "", dir)
		if handover {
			next.bucketRequest(b, s, "--force-path-style", "--read-only")
		}
		time.Sleep(50 * time.Millisecond) // the reader's longest op so far is one before the replacement
		reader.reset()
		if err := pod.proc.Signal(signal); err != nil {
			b.Fatal(err)
		}
		select {
		case <-pod.exited:
		case <-time.After(30 * time.Second):
			b.Fatalf("the mounter did not end after %v; output:\n%s", signal, pod.output.String())
		}
		start()
		select {
		case r := <-resumed:
			takeovers = append(takeovers, r.Pause)
		case <-time.After(30 * time.Second):
			b.Fatalf("no takeover; next mounter output:\n%s", next.output.String())
		}
		time.Sleep(50 * time.Millisecond) // the reader's next ops, after the takeover
		pauses = append(pauses, reader.reset())
		if err := reader.failed(); err != nil {
			b.Fatalf("replacement %d: the reader failed: %v", i, err)
		}
		pod = next
	}
	return pauses, takeovers
}

// longestOp opens, reads and closes a file in a loop and keeps the longest such operation since
// the last reset, and the first error.
type longestOp struct {
	mu      sync.Mutex
	longest time.Duration
	err     error
}

func (l *longestOp) loop(path string, stop <-chan struct{}) {
	buf := make([]byte, 64)
	for {
		select {
		case <-stop:
			return
		default:
		}
		start := time.Now()
		f, err := os.Open(path)
		if err == nil {
			_, err = f.Read(buf)
			_ = f.Close()
		}
		took := time.Since(start)
		l.mu.Lock()
		l.longest = max(l.longest, took)
		if err != nil && l.err == nil {
			l.err = err
		}
		l.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (l *longestOp) reset() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.longest
	l.longest = 0
	return d
}

func (l *longestOp) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// msAt is the p-th percentile of ds in milliseconds.
func msAt(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, len(s)*p/100)].Microseconds()) / 1000
}

func ptr[T any](v T) *T { return &v }
