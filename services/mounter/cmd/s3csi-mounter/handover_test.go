package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr/testr"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

// TestAMounterIsReplacedUnderItsReaders plays the node-agent and kubelet around a Mountpoint Pod
// whose mounter ends while a reader streams a 2 GiB file and a lister walks a 1000-entry directory
// through the mount, in the two ways a mounter ends under its workloads:
//
//   - killed: SIGKILL (an OOM kill, a crash); the node-agent's Kept connection goes to the
//     mounter kubelet starts next in the same pod (same comm dir);
//   - handed over: SIGTERM (the pod is deleted, evicted, upgraded) while a writer has a file open;
//     the mounter serves on until the writer closed it, then stops, hands the mount over and
//     exits 0; the connection goes to the mounter of the pod that replaces it (a new comm dir,
//     where KeepOptions.Next points, as the node-agent's does).
//
// The reader's checksum must be right and no workload may see an error; the writer's object must
// be whole. The test reports the longest pause each workload saw.
func TestAMounterIsReplacedUnderItsReaders(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	s := testenv.StartS3(t)
	const size, listed = 2 << 30, 1000
	client := s.RootClient()
	want := putLargeObject(t, s, "big.bin", size)
	for i := range listed {
		if _, err := client.PutObject(t.Context(), &s3.PutObjectInput{
			Bucket: aws.String(s.Bucket), Key: aws.String(fmt.Sprintf("dir/%04d", i)), Body: stringsReader("x"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildWorldExecutable(t)
	for _, tc := range []struct {
		name   string
		signal syscall.Signal
		// handover: the mounter hands the mount over to a new pod, and a writer is open at the
		// signal.
		handover bool
		// reattached: the node-agent restarted before the signal and got the connection back
		// from the mounter (handshake.Reattach).
		reattached bool
	}{
		{name: "killed", signal: syscall.SIGKILL},
		{name: "handed over", signal: syscall.SIGTERM, handover: true},
		{name: "handed over after a node-agent restart", signal: syscall.SIGTERM, handover: true, reattached: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			pod := startPodMounter(t, bin, "")
			nextDir := pod.commDir
			resumed := make(chan handshake.Resumption, 1)
			opts := handshake.KeepOptions{Log: testr.New(t), Resumed: func(r handshake.Resumption) { resumed <- r }}
			if tc.handover {
				nextDir = filepath.Join(t.TempDir(), "comm")
				if err := os.Mkdir(nextDir, 0o750); err != nil {
					t.Fatal(err)
				}
				opts.Next = func(context.Context, bool) (string, error) { return filepath.Join(nextDir, mppod.MountSockName), nil }
			}
			sent := pod.bucketRequest(t, s, "--force-path-style")
			source, kept := pod.keep(ctx, t, false, sent, opts)
			var err error
			if tc.reattached {
				kept.Close() // the node-agent restarts: its copies go
				sock := filepath.Join(pod.commDir, mppod.MountSockName)
				if kept, err = handshake.Reattach(ctx, sock, os.Getuid(), sent, opts); err != nil {
					t.Fatalf("reattach: %v; mounter output:\n%s", err, pod.output.String())
				}
				t.Cleanup(kept.Close)
				if got := kept.Request(); got.Bucket != s.Bucket || got.Resume {
					t.Fatalf("the reattached request names bucket %q, resume %t; want %q, false", got.Bucket, got.Resume, s.Bucket)
				}
			}

			// Forked before the writer opens its file: the fork's exec would close a copy of it, and
			// the close of any copy sends FLUSH, which completes the upload.
			next, start := standbyPodMounter(t, bin, "", nextDir)
			if tc.handover {
				next.bucketRequest(t, s, "--force-path-style") // the node-agent writes the profile files into the new comm dir
			}
			var writer *os.File
			written := strings.ReplaceAll(tc.name, " ", "-") + ".bin" // the subtests share the bucket
			payload := make([]byte, 3<<20)
			_, _ = rand.Read(payload)
			if tc.handover {
				if writer, err = os.Create(filepath.Join(source, written)); err != nil {
					t.Fatal(err)
				}
				if _, err := writer.Write(payload[:1<<20]); err != nil {
					t.Fatal(err)
				}
			}
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

			testenv.Eventually(t, time.Minute, "the reader a quarter through the file", func() bool { return reader.bytes() >= size/4 })
			if err := pod.proc.Signal(tc.signal); err != nil {
				t.Fatal(err)
			}
			if tc.handover {
				// The mounter waits for the writer: the mount still serves, the upload goes on.
				time.Sleep(300 * time.Millisecond)
				select {
				case <-pod.exited:
					t.Fatalf("the mounter exited while a file was open for writing: %v\n%s", pod.err, pod.output.String())
				default:
				}
				if _, err := writer.Write(payload[1<<20:]); err != nil {
					t.Errorf("write after SIGTERM: %v; mounter output:\n%s", err, pod.output.String())
				}
				if err := writer.Close(); err != nil {
					t.Errorf("close after SIGTERM: %v", err)
				}
			}
			select {
			case <-pod.exited:
			case <-time.After(time.Minute):
				t.Fatalf("the mounter did not exit within a minute of %v; output:\n%s", tc.signal, pod.output.String())
			}
			ended := time.Now()
			if tc.handover && pod.err != nil {
				t.Errorf("the mounter that handed its mount over exited with %v, want status 0; output:\n%s", pod.err, pod.output.String())
			}
			start()
			wg.Wait()

			if reader.err != nil || !bytes.Equal(sum, want) {
				t.Errorf("reader: error %v, checksum right %t, want no error and the right checksum; new mounter:\n%s",
					reader.err, bytes.Equal(sum, want), next.output.String())
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
			select {
			case r := <-resumed:
				if r.HandedOver != tc.handover {
					t.Errorf("the node-agent's side saw HandedOver %t, want %t", r.HandedOver, tc.handover)
				}
			case <-time.After(10 * time.Second):
				t.Error("Keep did not report the new mounter's takeover")
			}
			if tc.handover {
				got, err := os.ReadFile(filepath.Join(source, written))
				if err != nil || !bytes.Equal(got, payload) {
					t.Errorf("the file written across the hand-over: error %v, %d bytes, payload right %t, want %d bytes",
						err, len(got), bytes.Equal(got, payload), len(payload))
				}
			}
			t.Logf("mounter ended %s before the reader finished; longest pause: reader %s, lister %s (%d walks)",
				time.Since(ended).Round(time.Millisecond), reader.pause(), lister.pause(), lister.rounds())
		})
	}
}

// putLargeObject stores size pseudo-random bytes as key in s's bucket, through a file (the SDK
// signs a seekable body without holding it in memory), and returns their SHA-256.
func putLargeObject(t *testing.T, s *testenv.S3, key string, size int64) []byte {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), key))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	src := mathrand.NewChaCha8([32]byte{1})
	if _, err := io.CopyN(io.MultiWriter(f, h), src, size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RootClient().PutObject(t.Context(), &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String(key), Body: f, ContentLength: aws.Int64(size),
	}); err != nil {
		t.Fatal(err)
	}
	return h.Sum(nil)
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

// read streams path in 1 MiB reads, 1 ms apart, and returns its SHA-256.
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
		time.Sleep(time.Millisecond)
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

// TestAMounterWhoseKeeperIsGoneHandsOverOnceANodeAgentReattaches: after a node-agent restart, no
// one but the mounter holds the FUSE connection, so a mounter asked to stop must not hand its
// mount over (the connection would end, and its workloads with it): it serves on. Once the new
// node-agent reattached (handshake.Reattach), it hands the mount over, and the next mounter
// serves it.
func TestAMounterWhoseKeeperIsGoneHandsOverOnceANodeAgentReattaches(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	s := testenv.StartS3(t)
	if _, err := s.RootClient().PutObject(t.Context(), &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("seed.txt"), Body: stringsReader("seed"),
	}); err != nil {
		t.Fatal(err)
	}
	bin := buildWorldExecutable(t)
	pod := startPodMounter(t, bin, "")
	sent := pod.bucketRequest(t, s, "--force-path-style")
	source, kept := pod.keep(t.Context(), t, false, sent, handshake.KeepOptions{Log: testr.New(t)})
	kept.Close() // the node-agent restarts: its copies and its end of the handshake go
	if err := pod.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the mounter logging that its keeper is gone", func() bool {
		return strings.Contains(pod.output.String(), "the node-agent that holds the connection for the next mounter is gone")
	})
	select {
	case <-pod.exited:
		t.Fatalf("the mounter exited after SIGTERM with no keeper: %v\n%s", pod.err, pod.output.String())
	case <-time.After(500 * time.Millisecond):
	}
	if got, err := os.ReadFile(filepath.Join(source, "seed.txt")); err != nil || string(got) != "seed" {
		t.Fatalf("read after SIGTERM: %q, %v; want seed", got, err)
	}

	// The new node-agent reattaches: the mounter hands the mount over to the next one.
	nextDir := filepath.Join(t.TempDir(), "comm")
	if err := os.Mkdir(nextDir, 0o750); err != nil {
		t.Fatal(err)
	}
	next, start := standbyPodMounter(t, bin, "", nextDir)
	next.bucketRequest(t, s, "--force-path-style")
	sock := filepath.Join(pod.commDir, mppod.MountSockName)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	kept, err := handshake.Reattach(ctx, sock, os.Getuid(), sent, handshake.KeepOptions{Log: testr.New(t),
		Next: func(context.Context, bool) (string, error) { return filepath.Join(nextDir, mppod.MountSockName), nil }})
	if err != nil {
		t.Fatalf("reattach: %v; mounter output:\n%s", err, pod.output.String())
	}
	t.Cleanup(kept.Close)
	select {
	case <-pod.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the mounter did not hand over after the reattach; output:\n%s", pod.output.String())
	}
	if pod.err != nil {
		t.Errorf("the mounter that handed its mount over exited with %v, want status 0", pod.err)
	}
	start()
	if got, err := os.ReadFile(filepath.Join(source, "seed.txt")); err != nil || string(got) != "seed" {
		t.Fatalf("read through the next mounter: %q, %v; want seed; its output:\n%s", got, err, next.output.String())
	}
}
