package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/s3csi/s3csi/shared/testenv"
)

// unprivileged is the nobody user the mounter runs as in the passed-descriptor test.
const unprivileged = 65534

// buildWorldExecutable builds the mounter where an unprivileged user can execute it.
func buildWorldExecutable(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "s3csi-mounter-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { //nolint:gosec // the binary must be executable by nobody
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "s3csi-mounter")
	if err := testenv.GoBuild(t.Context(), ".", ".", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestBadArgumentsExitWithUsage(t *testing.T) {
	bin := buildWorldExecutable(t)
	out, err := exec.CommandContext(t.Context(), bin, "--no-such-option", "bucket-1", "/mnt").CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 2 {
		t.Fatalf("exit = %v, want status 2; output:\n%s", err, out)
	}
}

// TestServesPassedDescriptorAsNobody mounts /dev/fuse as root, passes the descriptor to the
// mounter running as nobody, and reads the bucket through the mount.
func TestServesPassedDescriptorAsNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	s := testenv.StartS3(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := s.RootClient().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("dir/hello.txt"), Body: stringsReader("through a passed fd"),
	}); err != nil {
		t.Fatal(err)
	}
	bin := buildWorldExecutable(t)

	fuseDev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open /dev/fuse (modprobe fuse): %v", err)
	}
	defer fuseDev.Close()
	target := t.TempDir()
	if err := os.Chmod(filepath.Dir(target), 0o755); err != nil { //nolint:gosec // another user must reach the mount
		t.Fatal(err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,max_read=%d", fuseDev.Fd(), 1<<20)
	if err := syscall.Mount("s3csi", target, "fuse.s3csi", syscall.MS_NOSUID|syscall.MS_NODEV, data); err != nil {
		t.Fatalf("mount fuse: %v", err)
	}

	cmd := exec.Command(bin, "--endpoint-url", s.Endpoint, "--region", s.Region, "--force-path-style",
		"--allow-delete", "--allow-root", s.Bucket, "/dev/fd/3")
	cmd.ExtraFiles = []*os.File{fuseDev}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: unprivileged, Gid: unprivileged}}
	cmd.Env = []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey, "HOME=/nonexistent"}
	output := &syncWriter{}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		_ = syscall.Unmount(target, syscall.MNT_DETACH)
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status does not matter after unmount
		close(exited)
	}()
	t.Cleanup(func() {
		if err := syscall.Unmount(target, 0); err != nil {
			_ = syscall.Unmount(target, syscall.MNT_DETACH)
		}
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("mounter still running 15s after unmount; output:\n%s", output.String())
		}
	})
	// The parent's copy is no longer needed once the child holds the descriptor.
	_ = fuseDev.Close()

	got, err := os.ReadFile(filepath.Join(target, "dir/hello.txt"))
	if err != nil || string(got) != "through a passed fd" {
		t.Fatalf("read through the passed descriptor = %q, %v; mounter output:\n%s", got, err, output.String())
	}
	// The kernel lets every user in (allow_other); --allow-root admits root besides the
	// mounter's own user, and nobody else.
	cat := exec.CommandContext(ctx, "cat", filepath.Join(target, "dir/hello.txt"))
	cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4321, Gid: 4321}}
	if out, err := cat.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("uid 4321 read = %q, %v; want permission denied", out, err)
	}
	if err := os.WriteFile(filepath.Join(target, "dir/new.txt"), []byte("written"), 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	if _, err := s.RootClient().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("dir/new.txt")}); err != nil {
		var nf *types.NotFound
		t.Fatalf("new object not in the bucket (not found: %v): %v", errors.As(err, &nf), err)
	}
	fi, err := os.Stat(filepath.Join(target, "dir/hello.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != unprivileged {
		t.Fatalf("file owner = %v, want the mounter's uid %d", fi.Sys(), unprivileged)
	}
}
