package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/testenv"
)

// TestFiftyReadersAndTenWritersUnderA256MiBLimitAreNeverOOMKilled runs the mounter in a memory
// cgroup limited to 256 MiB, as a Mountpoint Pod with that limit, without any memory option:
// it takes its memory target from the limit. 50 readers of different files and 10 writers at
// once all succeed, with the right bytes in the bucket, and the cgroup records no OOM kill.
func TestFiftyReadersAndTenWritersUnderA256MiBLimitAreNeverOOMKilled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts FUSE and creates a memory cgroup: run it as root")
	}
	const (
		limit      = 256 << 20
		readers    = 50
		writers    = 10
		objectSize = 8 << 20
		writeSize  = 24 << 20
		ioSize     = 256 << 10
	)
	s := testenv.StartS3(t)
	client := s.RootClient()
	sums := make([][sha256.Size]byte, readers)
	for i := range readers {
		data := content(i, objectSize)
		sums[i] = sha256.Sum256(data)
		if _, err := client.PutObject(t.Context(), &s3.PutObjectInput{
			Bucket: aws.String(s.Bucket), Key: aws.String(fmt.Sprintf("r/%d.bin", i)), Body: bytes.NewReader(data),
		}); err != nil {
			t.Fatal(err)
		}
	}
	cg := newMemoryCgroup(t, limit)
	bin := buildWorldExecutable(t)
	dir := t.TempDir()
	// The shell joins the cgroup, then becomes the mounter, which reads its limit at the mount.
	cmd := exec.CommandContext(t.Context(), "sh", "-c", `echo $$ > "$0" && exec "$@"`, cg.procs,
		bin, "--endpoint-url", s.Endpoint, "--region", s.Region, "--force-path-style", s.Bucket, dir)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey)
	output := &syncWriter{}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed once the mounter has exited, with waitErr set
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	testenv.Eventually(t, 15*time.Second, "the mount", func() bool { return fsType(dir) == unix.FUSE_SUPER_MAGIC })
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	// Readers of a mount whose server the kernel killed can hang: the watchdog below aborts the
	// FUSE connection so that the test fails instead.
	abort := filepath.Join("/sys/fs/fuse/connections", strconv.FormatUint(uint64(unix.Minor(st.Dev)), 10), "abort")
	if !strings.Contains(output.String(), `"from":"the container's memory limit"`) {
		t.Errorf("the mounter did not take its memory target from the cgroup's limit; output:\n%s", output.String())
	}

	var wg sync.WaitGroup
	errs := make(chan error, readers+writers)
	for i := range readers {
		wg.Go(func() {
			f, err := os.Open(filepath.Join(dir, "r", strconv.Itoa(i)+".bin"))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			h := sha256.New()
			if _, err := io.CopyBuffer(h, f, make([]byte, ioSize)); err != nil {
				errs <- fmt.Errorf("reader %d: %w", i, err)
				return
			}
			if [sha256.Size]byte(h.Sum(nil)) != sums[i] {
				errs <- fmt.Errorf("reader %d read other bytes than the object's", i)
			}
		})
	}
	for i := range writers {
		wg.Go(func() {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("w%d.bin", i)))
			if err != nil {
				errs <- err
				return
			}
			data := content(1000+i, writeSize)
			for off := 0; off < len(data); off += ioSize {
				if _, err := f.Write(data[off : off+ioSize]); err != nil {
					_ = f.Close()
					errs <- fmt.Errorf("writer %d: %w", i, err)
					return
				}
			}
			if err := f.Close(); err != nil {
				errs <- fmt.Errorf("writer %d: close: %w", i, err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Errorf("50 readers and 10 writers did not finish within 3 minutes; cgroup OOM kills: %d, peak %d MiB",
			cg.oomKills(t), cg.peak(t)>>20)
		_ = cmd.Process.Kill()
		_ = os.WriteFile(abort, []byte("1"), 0o200) //nolint:gosec // a fusectl file
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case <-exited:
		t.Fatalf("the mounter exited during the load: %v; cgroup OOM kills: %d; output:\n%s", waitErr, cg.oomKills(t), lastLines(output.String(), 20))
	default:
	}
	if n := cg.oomKills(t); n > 0 {
		t.Fatalf("the cgroup recorded %d OOM kills", n)
	}
	t.Logf("peak memory of the mounter's cgroup: %d MiB of %d MiB", cg.peak(t)>>20, limit>>20)
	for i := range writers {
		out, err := client.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(fmt.Sprintf("w%d.bin", i))})
		if err != nil {
			t.Fatalf("object of writer %d: %v", i, err)
		}
		got, err := io.ReadAll(out.Body)
		_ = out.Body.Close()
		if err != nil || !bytes.Equal(got, content(1000+i, writeSize)) {
			t.Errorf("object of writer %d: %d bytes, not what it wrote (%v)", i, len(got), err)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// content is n reproducible pseudo-random bytes for seed.
func content(seed, n int) []byte {
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

// memoryCgroup is a memory cgroup of its own for one test, v2 or v1, whichever the host has.
type memoryCgroup struct {
	dir, procs string
	v2         bool
}

func newMemoryCgroup(t *testing.T, limit int64) *memoryCgroup {
	t.Helper()
	name := fmt.Sprintf("s3csi-test-%d", os.Getpid())
	write := func(dir, file, value string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil { //nolint:gosec // a cgroup file
			t.Fatalf("write %s to %s: %v", value, file, err)
		}
	}
	var cg *memoryCgroup
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && strings.Contains(string(b), "memory") {
		cg = &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup", name), v2: true}
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		cg = &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", name)}
	} else {
		t.Fatal("no memory cgroup controller: mount cgroup v2 with the memory controller enabled at its root, or cgroup v1's memory hierarchy at /sys/fs/cgroup/memory")
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Fatalf("create the test's memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		// Processes leave a cgroup only once they have exited; the mount's cleanup runs first.
		testenv.Eventually(t, 10*time.Second, "the test's memory cgroup removed", func() bool {
			err := os.Remove(cg.dir)
			return err == nil || os.IsNotExist(err)
		})
	})
	cg.procs = filepath.Join(cg.dir, "cgroup.procs")
	if cg.v2 {
		write(cg.dir, "memory.max", strconv.FormatInt(limit, 10))
		write(cg.dir, "memory.swap.max", "0")
	} else {
		write(cg.dir, "memory.limit_in_bytes", strconv.FormatInt(limit, 10))
		if _, err := os.Stat(filepath.Join(cg.dir, "memory.memsw.limit_in_bytes")); err == nil {
			write(cg.dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(limit, 10))
		}
	}
	return cg
}

// oomKills is how many processes the kernel killed for the cgroup's limit.
func (c *memoryCgroup) oomKills(t *testing.T) int {
	t.Helper()
	file := "memory.oom_control"
	if c.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: %q", file, line)
			}
			return n
		}
	}
	t.Fatalf("%s has no oom_kill count (kernel 4.13 or later is needed):\n%s", file, b)
	return 0
}

// peak is the cgroup's highest memory use, page cache included.
func (c *memoryCgroup) peak(t *testing.T) int64 {
	t.Helper()
	file := "memory.max_usage_in_bytes"
	if c.v2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
