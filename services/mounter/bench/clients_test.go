package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/testenv"
)

// client is one FUSE S3 client under test.
type client struct {
	name string
	// command returns the foreground mount command for bucket at dir.
	command func(b *testing.B, s *testenv.S3, dir string) *exec.Cmd
}

func clients(mounter string) []client {
	return []client{
		{name: "s3csi-mounter", command: func(_ *testing.B, s *testenv.S3, dir string) *exec.Cmd {
			cmd := exec.Command(mounter, "--endpoint-url", s.Endpoint, "--region", s.Region,
				"--force-path-style", "--allow-overwrite", "--allow-delete", s.Bucket, dir)
			cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey)
			return cmd
		}},
		{name: "s3fs", command: func(b *testing.B, s *testenv.S3, dir string) *exec.Cmd {
			passwd := filepath.Join(b.TempDir(), "passwd")
			if err := os.WriteFile(passwd, []byte(s.AccessKey+":"+s.SecretKey+"\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			return exec.Command("s3fs", s.Bucket, dir, "-f", "-o",
				"url="+s.Endpoint+",use_path_request_style,passwd_file="+passwd+",parallel_count=8,multipart_size=16")
		}},
		{name: "rclone", command: func(_ *testing.B, s *testenv.S3, dir string) *exec.Cmd {
			cmd := exec.Command("rclone", "mount", ":s3:"+s.Bucket, dir, "--s3-provider", "Other",
				"--s3-endpoint", s.Endpoint, "--s3-chunk-size", "16M", "--s3-upload-concurrency", "8",
				"--vfs-cache-mode", "off")
			// Credentials through the environment keep them out of ps; rclone 1.60 fails on AWS_CA_BUNDLE.
			cmd.Env = []string{"RCLONE_S3_ACCESS_KEY_ID=" + s.AccessKey, "RCLONE_S3_SECRET_ACCESS_KEY=" + s.SecretKey,
				"HOME=" + os.TempDir(), "PATH=" + os.Getenv("PATH")}
			return cmd
		}},
	}
}

// requireTools fails when fio or a compared client is not installed.
func requireTools(b *testing.B) {
	b.Helper()
	for _, tool := range []string{"fio", "s3fs", "rclone"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Fatalf("%s not found: apt-get install -y fio s3fs rclone (make bench-deps)", tool)
		}
	}
	if os.Geteuid() != 0 {
		b.Fatal("the comparison mounts FUSE filesystems: run it as root")
	}
}

// mounted is a client process serving dir.
type mounted struct {
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

func startClient(b *testing.B, c client, s *testenv.S3) *mounted {
	b.Helper()
	dir := b.TempDir()
	cmd := c.command(b, s, dir)
	out, err := os.Create(filepath.Join(b.TempDir(), "output"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", c.name, err)
	}
	m := &mounted{cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the exit status after unmount does not matter
		close(m.done)
	}()
	b.Cleanup(m.stop)
	deadline := time.Now().Add(30 * time.Second)
	for !isMounted(dir) {
		select {
		case <-m.done:
			log, _ := os.ReadFile(out.Name())
			b.Fatalf("%s exited before mounting:\n%s", c.name, log)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not mount %s within 30s", c.name, dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return m
}

func (m *mounted) stop() {
	if err := syscall.Unmount(m.dir, 0); err != nil {
		_ = syscall.Unmount(m.dir, syscall.MNT_DETACH)
	}
	select {
	case <-m.done:
	case <-time.After(15 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// peakRSS is the client's peak resident set (VmHWM) in MiB.
func (m *mounted) peakRSS() float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds is the CPU time the client process has used (utime+stime of /proc/PID/stat).
func (m *mounted) cpuSeconds() float64 {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which may hold spaces: state is the first, utime the 12th.
	_, rest, ok := strings.Cut(string(stat), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every Linux architecture
// this runs on.
const clockTicks = 100

func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && fields[4] == dir {
			return true
		}
	}
	return false
}

func buildMounter(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "s3csi-mounter")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := testenv.GoBuild(ctx, "..", "./cmd/s3csi-mounter", bin); err != nil {
		b.Fatal(err)
	}
	return bin
}
