package main

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/testenv"
)

// TestKilledMounterLeavesNoPartialObject kills the mounter with SIGKILL while a large file is
// being written through it, once parts of the file are in the bucket's multipart upload: the
// application's writes and close fail, and the bucket shows no object.
func TestKilledMounterLeavesNoPartialObject(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts FUSE: run it as root")
	}
	s := testenv.StartS3(t)
	bin := buildWorldExecutable(t)
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), bin, "--endpoint-url", s.Endpoint, "--region", s.Region, "--force-path-style",
		"--write-part-size", strconv.Itoa(5<<20), s.Bucket, dir)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey)
	output := &syncWriter{}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	testenv.Eventually(t, 15*time.Second, "the mount", func() bool { return fsType(dir) == unix.FUSE_SUPER_MAGIC })

	f, err := os.Create(filepath.Join(dir, "killed.bin"))
	if err != nil {
		t.Fatalf("create: %v; output:\n%s", err, output.String())
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	_, _ = rand.Read(chunk)
	for range 11 {
		if _, err := f.Write(chunk); err != nil {
			t.Fatalf("write: %v; output:\n%s", err, output.String())
		}
	}
	client := s.RootClient()
	testenv.Eventually(t, 30*time.Second, "a part of the file in the bucket's multipart upload", func() bool {
		uploads, err := client.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(s.Bucket)})
		if err != nil || len(uploads.Uploads) != 1 {
			return false
		}
		parts, err := client.ListParts(t.Context(), &s3.ListPartsInput{
			Bucket: aws.String(s.Bucket), Key: uploads.Uploads[0].Key, UploadId: uploads.Uploads[0].UploadId,
		})
		return err == nil && len(parts.Parts) > 0
	})

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if _, err := f.Write(chunk); err == nil {
		t.Fatal("a write after the mounter was killed succeeded")
	}
	if err := f.Close(); err == nil {
		t.Fatal("close after the mounter was killed succeeded")
	}
	objects, err := client.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(objects.Contents) != 0 {
		t.Fatalf("bucket holds %d objects after the kill (first %s), want none", len(objects.Contents), aws.ToString(objects.Contents[0].Key))
	}
}
