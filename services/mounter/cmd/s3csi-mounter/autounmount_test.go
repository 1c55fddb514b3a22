package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/testenv"
)

// TestAutoUnmountAfterTheMounterIsKilled kills the mounter with SIGKILL, which it cannot
// handle: with --auto-unmount the mount goes away; without it, a dead mount stays behind.
func TestAutoUnmountAfterTheMounterIsKilled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts FUSE: run it as root")
	}
	s := testenv.StartS3(t)
	bin := buildWorldExecutable(t)
	for _, tt := range []struct {
		name        string
		autoUnmount bool
	}{
		{name: "with auto-unmount the mount is removed", autoUnmount: true},
		{name: "without auto-unmount a dead mount stays"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--endpoint-url", s.Endpoint, "--region", s.Region, "--force-path-style"}
			if tt.autoUnmount {
				args = append(args, "--auto-unmount")
			}
			cmd := exec.CommandContext(t.Context(), bin, append(args, s.Bucket, dir)...)
			cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey)
			output := &syncWriter{}
			cmd.Stdout, cmd.Stderr = output, output
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
			// Kill only once the mounter says it serves: until then go-fuse may hold a file of the
			// mount open (its poll probe), and a process killed then waits in its own exit for an
			// answer only it could give, in the kernel, for ever.
			testenv.Eventually(t, 15*time.Second, "the mount to serve", func() bool {
				return strings.Contains(output.String(), "Serving bucket") && fsType(dir) == unix.FUSE_SUPER_MAGIC
			})

			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if tt.autoUnmount {
				testenv.Eventually(t, 15*time.Second, "the auto-unmount", func() bool { return fsType(dir) != unix.FUSE_SUPER_MAGIC && fsType(dir) != 0 })
				return
			}
			time.Sleep(time.Second) // what a watcher would have needed
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); !errors.Is(err, syscall.ENOTCONN) {
				t.Fatalf("statfs after the kill = %v, want ENOTCONN (a dead mount); output:\n%s", err, output.String())
			}
		})
	}
}

// fsType is the filesystem magic at dir, 0 when statfs fails.
func fsType(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return st.Type
}
