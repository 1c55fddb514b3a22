package credentials_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/commdir"
	"github.com/s3csi/s3csi/shared/mppod"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

func TestWriteNeverFollowsASymlinkThePodPlanted(t *testing.T) {
	creds := credentials.Static{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret-example"}
	tests := []struct {
		name string
		// plant puts a symlink in commDir pointing into outside and returns what must stay as is.
		plant func(t *testing.T, commDir, outside string) string
		// refused: Write fails; otherwise it replaces the link with a regular file.
		refused bool
		link    string
	}{
		{name: "a symlink at credentials/ to another dir is refused", refused: true,
			link: mppod.CredentialsName,
			plant: func(t *testing.T, commDir, outside string) string {
				if err := os.Symlink(outside, filepath.Join(commDir, mppod.CredentialsName)); err != nil {
					t.Fatal(err)
				}
				return outside
			}},
		{name: "a symlink at the credentials file to another file is replaced, not written through",
			link: filepath.Join(mppod.CredentialsName, credentials.CredentialsFileName),
			plant: func(t *testing.T, commDir, outside string) string {
				dir := filepath.Join(commDir, mppod.CredentialsName)
				if err := os.Mkdir(dir, 0o750); err != nil {
					t.Fatal(err)
				}
				target := filepath.Join(outside, "victim")
				if err := os.Symlink(target, filepath.Join(dir, credentials.CredentialsFileName)); err != nil {
					t.Fatal(err)
				}
				return target
			}},
		{name: "a symlink at the config file to another file is replaced, not written through",
			link: filepath.Join(mppod.CredentialsName, credentials.ConfigFileName),
			plant: func(t *testing.T, commDir, outside string) string {
				dir := filepath.Join(commDir, mppod.CredentialsName)
				if err := os.Mkdir(dir, 0o750); err != nil {
					t.Fatal(err)
				}
				target := filepath.Join(outside, "victim")
				if err := os.Symlink(target, filepath.Join(dir, credentials.ConfigFileName)); err != nil {
					t.Fatal(err)
				}
				return target
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			commDir, outside := t.TempDir(), t.TempDir()
			if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("untouched"), 0o600); err != nil {
				t.Fatal(err)
			}
			tt.plant(t, commDir, outside)
			_, err := credentials.Write(commDir, creds, "us-east-1")
			if tt.refused {
				if !errors.Is(err, commdir.ErrUnsafe) {
					t.Fatalf("Write = %v, want ErrUnsafe", err)
				}
			} else if err != nil {
				t.Fatalf("Write = %v", err)
			}
			entries, err := os.ReadDir(outside)
			if err != nil || len(entries) != 1 || entries[0].Name() != "victim" {
				t.Fatalf("the dir outside holds %v (%v), want only the victim file", entries, err)
			}
			if b, err := os.ReadFile(filepath.Join(outside, "victim")); err != nil || string(b) != "untouched" {
				t.Fatalf("the file outside holds %q (%v), want it untouched", b, err)
			}
			if !tt.refused {
				fi, err := os.Lstat(filepath.Join(commDir, tt.link))
				if err != nil || !fi.Mode().IsRegular() {
					t.Fatalf("%s is %v (%v), want the link replaced by a regular file", tt.link, fi.Mode(), err)
				}
			}
		})
	}
}

// Profiles never prints its keys, wherever it is logged.
func TestProfilesDoNotPrintTheirKeys(t *testing.T) {
	p := credentials.Render(credentials.Static{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret-example"}, "us-east-1")
	if got := fmt.Sprint(p); strings.Contains(got, "secret-example") || strings.Contains(got, "AKIDEXAMPLE") {
		t.Errorf("Profiles printed its keys: %s", got)
	}
}
