package mounter

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
)

func TestPrepare(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	tests := []struct {
		name    string
		req     *handshake.Request
		wantErr string
		check   func(t *testing.T, cacheDir string, env map[string]string)
	}{
		{
			name: "profile files become paths in the comm dir and settings pass through",
			req: &handshake.Request{Bucket: "bucket-1", MaxRead: mount.FUSEMaxRead, Env: []string{"AWS_REGION=r1"},
				ConfigFile: "credentials/c", CredentialsFile: "credentials/k"},
			check: func(t *testing.T, _ string, env map[string]string) {
				if env["AWS_CONFIG_FILE"] != "/comm/credentials/c" || env["AWS_SHARED_CREDENTIALS_FILE"] != "/comm/credentials/k" || env["AWS_REGION"] != "r1" {
					t.Fatalf("env = %v", env)
				}
			},
		},
		{
			name: "a cache name becomes a fresh directory of the pod",
			req:  &handshake.Request{Bucket: "bucket-1", MaxRead: mount.FUSEMaxRead, Args: []string{"--cache=mycache"}},
			check: func(t *testing.T, cacheDir string, _ map[string]string) {
				if cacheDir != filepath.Join(tmp, "s3csi-cache", "mycache") {
					t.Fatalf("cache dir = %q", cacheDir)
				}
				if fi, err := os.Stat(cacheDir); err != nil || fi.Mode().Perm() != 0o700 {
					t.Fatalf("cache dir: %v, %v", fi, err)
				}
			},
		},
		{name: "a cache path is refused", req: &handshake.Request{Bucket: "bucket-1", MaxRead: mount.FUSEMaxRead, Args: []string{"--cache=/var/lib"}}, wantErr: "not a plain name"},
		{name: "a cache name that climbs out is refused", req: &handshake.Request{Bucket: "bucket-1", MaxRead: mount.FUSEMaxRead, Args: []string{"--cache=../x"}}, wantErr: "not a plain name"},
		{name: "another max_read is refused", req: &handshake.Request{Bucket: "bucket-1", MaxRead: 4096}, wantErr: "max_read=4096"},
		{name: "a setting outside the allowed ones is refused", req: &handshake.Request{Bucket: "bucket-1", MaxRead: mount.FUSEMaxRead, Env: []string{"AWS_SECRET_ACCESS_KEY=x"}}, wantErr: `"AWS_SECRET_ACCESS_KEY" is not allowed`},
		{name: "a profile file outside the comm dir is refused", req: &handshake.Request{Bucket: "bucket-1", MaxRead: mount.FUSEMaxRead, ConfigFile: "../etc/x"}, wantErr: "outside the comm dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, env, err := prepare("/comm", 7, tt.req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if opts.MountPoint != "/dev/fd/7" || opts.Bucket != "bucket-1" {
				t.Fatalf("mount point %q bucket %q", opts.MountPoint, opts.Bucket)
			}
			tt.check(t, opts.CacheDir, env)
		})
	}
}
