package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr/testr"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

// TestKilledMounterIsReplacedUnderItsReaders plays the node-agent and kubelet around a Mountpoint
// Pod whose mounter is killed with SIGKILL while a reader streams a large file and a lister walks
// a directory through the mount: the node-agent's Kept connection hands the FUSE connection and
// its state to the mounter kubelet starts next in the same pod, and both workloads carry on. The
// reader's checksum must be right and neither may see an error; the test reports the longest
// pause each saw.
func TestKilledMounterIsReplacedUnderItsReaders(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	s := testenv.StartS3(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const size, listed = 96 << 20, 300
	content := make([]byte, size)
	_, _ = rand.Read(content)
	client := s.RootClient()
	if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("big.bin"), Body: bytes.NewReader(content)}); err != nil {
		t.Fatal(err)
	}
	for i := range listed {
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.Bucket), Key: aws.String(fmt.Sprintf("dir/%04d", i)), Body: stringsReader("x"),
		}); err != nil {
			t.Fatal(err)
		}
	}

	bin := buildWorldExecutable(t)
	pod := startPodMounter(t, bin, "")
	source := filepath.Join(t.TempDir(), "source")
	if err := os.Mkdir(source, 0o750); err != nil {
		t.Fatal(err)
	}
	dev, err := mount.FUSE(source, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(source, syscall.MNT_DETACH) })
	kept, err := handshake.Keep(ctx, filepath.Join(pod.commDir, mppod.MountSockName), os.Getuid(), dev,
		pod.bucketRequest(t, s, "--force-path-style", "--read-only"), handshake.KeepOptions{Log: testr.New(t)})
	_ = dev.Close()
	if err != nil {
		t.Fatalf("mount request: %v; mounter output:\n%s", err, pod.output.String())
	}
	t.Cleanup(kept.Close)

	reader := &watchedWorkload{}
	lister := &watchedWorkload{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sum []byte
	wg.Go(func() {
		defer close(stop)
		sum = reader.read(filepath.Join(source, "big.bin"))
	})
	wg.Go(func() { lister.list(filepath.Join(source, "dir"), listed, stop) })

	next, start := standbyPodMounter(t, bin, "", pod.commDir)
	testenv.Eventually(t, time.Minute, "the reader a quarter through the file", func() bool { return reader.bytes() >= size/4 })
	if err := pod.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-pod.exited
	killed := time.Now()
	start()
	wg.Wait()

	want := sha256.Sum256(content)
	if reader.err != nil || !bytes.Equal(sum, want[:]) {
		t.Errorf("reader: error %v, checksum right %t, want no error and the right checksum; new mounter:\n%s",
			reader.err, bytes.Equal(sum, want[:]), next.output.String())
	}
	if lister.err != nil {
		t.Errorf("lister: %v; new mounter:\n%s", lister.err, next.output.String())
	}
	if reader.bytes() != size {
		t.Errorf("reader read %d bytes, want %d", reader.bytes(), size)
	}
	if lister.rounds() == 0 {
		t.Error("the lister never finished a walk")
	}
	t.Logf("mounter killed %s before the reader finished; longest pause: reader %s, lister %s (%d walks)",
		time.Since(killed).Round(time.Millisecond), reader.pause(), lister.pause(), lister.rounds())
}

// watchedWorkload is a reader or a lister of the mount, with what it saw.
type watchedWorkload struct {
	mu      sync.Mutex
	n       int64
	longest time.Duration
	err     error
}

func (w *watchedWorkload) step(n int64, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += n
	w.longest = max(w.longest, took)
}

func (w *watchedWorkload) bytes() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func (w *watchedWorkload) rounds() int64 { return w.bytes() }

func (w *watchedWorkload) pause() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest.Round(time.Millisecond)
}

// read streams path in 1 MiB reads, 4 ms apart, and returns its SHA-256.
func (w *watchedWorkload) read(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		w.err = err
		return nil
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for {
		start := time.Now()
		n, err := f.Read(buf)
		w.step(int64(n), time.Since(start))
		h.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			return h.Sum(nil)
		}
		if err != nil {
			w.err = err
			return nil
		}
		time.Sleep(4 * time.Millisecond)
	}
}

// list walks dir until stop closes, each walk with a new handle read 50 entries at a time; every
// walk must see want entries.
func (w *watchedWorkload) list(dir string, want int, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		start := time.Now()
		f, err := os.Open(dir)
		if err != nil {
			w.err = err
			return
		}
		got := 0
		for {
			names, err := f.Readdirnames(50)
			got += len(names)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				_ = f.Close()
				w.err = err
				return
			}
			time.Sleep(time.Millisecond)
		}
		_ = f.Close()
		if got != want {
			w.err = fmt.Errorf("a walk saw %d entries, want %d", got, want)
			return
		}
		w.step(1, time.Since(start))
	}
}
