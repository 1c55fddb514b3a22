package credentials_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// ReadProfiles gives back what Write wrote, for the pod that replaces a Mountpoint Pod, and reads
// nothing the pod could have planted instead: a symlink, a FIFO, a huge file.
func TestReadProfilesReadsWhatWriteWroteAndNothingPlanted(t *testing.T) {
	commDir := t.TempDir()
	creds := credentials.Static{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret-example"}
	if _, err := credentials.Write(commDir, creds, "us-east-1"); err != nil {
		t.Fatal(err)
	}
	got, err := credentials.ReadProfiles(commDir)
	if err != nil {
		t.Fatal(err)
	}
	if want := credentials.Render(creds, "us-east-1"); string(got.Config) != string(want.Config) || string(got.Credentials) != string(want.Credentials) {
		t.Fatal("ReadProfiles did not give back what Write wrote")
	}
	file := filepath.Join(commDir, mppod.CredentialsName, credentials.CredentialsFileName)
	for _, plant := range []struct {
		name string
		do   func() error
	}{
		{"a symlink to another file", func() error { return os.Symlink("/etc/hostname", file) }},
		{"a FIFO", func() error { return syscall.Mkfifo(file, 0o600) }},
		{"a file of 1 MiB", func() error { return os.WriteFile(file, make([]byte, 1<<20), 0o600) }},
	} {
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		if err := plant.do(); err != nil {
			t.Fatal(err)
		}
		if _, err := credentials.ReadProfiles(commDir); err == nil {
			t.Errorf("ReadProfiles read %s planted at the credentials file", plant.name)
		}
	}
	if got := fmt.Sprint(got); strings.Contains(got, "secret-example") {
		t.Errorf("Profiles printed its secret: %s", got)
	}
}
