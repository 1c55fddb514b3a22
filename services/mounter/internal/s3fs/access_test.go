package s3fs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/shared/testenv"
)

// otherUser is a uid that neither owns the test's mounts nor is root.
const otherUser = 4321

// TestOnlyTheOwnerEntersWithoutAllowOther mounts as root (the owner) and reads the mount as
// another user from a child process: mount-s3 lets that user in only with --allow-other.
func TestOnlyTheOwnerEntersWithoutAllowOther(t *testing.T) {
	requireFUSE(t)
	s := testenv.StartS3(t)
	putObject(t, s, "shared.txt", []byte("for whom?"))
	tests := []struct {
		name       string
		allowOther bool
		allowRoot  bool
		wantDenied bool
	}{
		{name: "another user is refused without allow-other", wantDenied: true},
		// The kernel lets everyone in here (allow_other, for root): the filesystem refuses.
		{name: "another user is refused with allow-root alone", allowRoot: true, wantDenied: true},
		{name: "another user reads with allow-other", allowOther: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := baseOptions(s)
			opts.AllowOther, opts.AllowRoot = tt.allowOther, tt.allowRoot
			dir := worldTraversableDir(t)
			m, err := Mount(context.Background(), dir, Config{
				Options:     opts,
				Credentials: credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
				Log:         logr.Discard(),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer unmountFS(t, dir, m)

			if got, err := os.ReadFile(filepath.Join(dir, "shared.txt")); err != nil || string(got) != "for whom?" {
				t.Fatalf("owner read = %q, %v", got, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "cat", filepath.Join(dir, "shared.txt"))
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUser, Gid: otherUser}}
			out, err := cmd.CombinedOutput()
			denied := err != nil && strings.Contains(string(out), "Permission denied")
			if denied != tt.wantDenied || (!tt.wantDenied && string(out) != "for whom?") {
				t.Fatalf("uid %d: cat = %q, %v; want denied=%v", otherUser, out, err, tt.wantDenied)
			}
		})
	}
}

// worldTraversableDir is an empty directory every user can reach, unlike t.TempDir's.
func worldTraversableDir(t *testing.T) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "s3fs-access-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	dir := filepath.Join(parent, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o755); err != nil { //nolint:gosec // other users must reach the mount
		t.Fatal(err)
	}
	return dir
}
