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

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/app"
)

// TestCommDirModeRunsMountS3OnThePassedDescriptor plays the node-agent against a Mountpoint
// Pod whose operator chose the mount-s3 engine. The "mount-s3" binary is a script that records
// its command line and runs this mounter's own command-line mode, which takes mount-s3's
// options: the test proves that the engine starts the binary on the passed FUSE connection
// with the request's options and profile files, that the bucket is served through it, and
// that the pod exits 0 once the node-agent asked it to and unmounted.
func TestCommDirModeRunsMountS3OnThePassedDescriptor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	s := testenv.StartS3(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := s.RootClient().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String("hello.txt"), Body: stringsReader("served by mount-s3"),
	}); err != nil {
		t.Fatal(err)
	}
	bin := buildWorldExecutable(t)
	dir := t.TempDir()
	record := filepath.Join(dir, "mount-s3.args")
	script := filepath.Join(dir, "mount-s3")
	// The stand-in must not follow the engine switch itself, or it would start itself forever.
	attempts := filepath.Join(dir, "mount-s3.attempts")
	scriptText := fmt.Sprintf("#!/bin/sh\nunset %s\necho \"$@\" > %s\necho \"$AWS_MAX_ATTEMPTS\" > %s\nexec %s \"$@\"\n",
		app.EngineEnv, record, attempts, bin)
	if err := os.WriteFile(script, []byte(scriptText), 0o755); err != nil { //nolint:gosec // a test script
		t.Fatal(err)
	}
	pod := startPodMounter(t, bin, script)
	source := filepath.Join(dir, "source")
	err := pod.mount(ctx, t, source, pod.bucketRequest(t, s, "--force-path-style", "--allow-root", "--read-only", "--aws-max-attempts=5"))
	if err != nil {
		t.Fatalf("mount request: %v; mounter output:\n%s", err, pod.output.String())
	}

	got, err := os.ReadFile(filepath.Join(source, "hello.txt"))
	if err != nil || string(got) != "served by mount-s3" {
		t.Fatalf("read through mount-s3 = %q, %v; output:\n%s", got, err, pod.output.String())
	}
	args, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--read-only", "--allow-root", "--force-path-style", "--foreground", s.Bucket + " /dev/fd/3"} {
		if !strings.Contains(string(args), want) {
			t.Errorf("mount-s3 command line %q lacks %q", args, want)
		}
	}
	// mount-s3 has no --aws-max-attempts: the engine hands it over as the SDK's variable.
	if strings.Contains(string(args), "aws-max-attempts") {
		t.Errorf("mount-s3 command line %q holds --aws-max-attempts", args)
	}
	if got, err := os.ReadFile(attempts); err != nil || strings.TrimSpace(string(got)) != "5" {
		t.Errorf("mount-s3 ran with AWS_MAX_ATTEMPTS=%q, %v; want 5", got, err)
	}

	if err := os.WriteFile(filepath.Join(pod.commDir, mppod.MountExitName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(source, 0); err != nil {
		t.Fatal(err)
	}
	if code := pod.exitCode(t); code != 0 {
		t.Fatalf("Mountpoint Pod exit status %d, want 0 after the exit request; output:\n%s", code, pod.output.String())
	}
}

// TestMountS3EngineReportsAnEarlyExit checks that a mount-s3 that cannot serve turns into the
// mount request's error, with its own words, and a non-zero exit with mount.err written.
func TestMountS3EngineReportsAnEarlyExit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts /dev/fuse: run it as root")
	}
	bin := buildWorldExecutable(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "mount-s3")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'Error: Failed to create S3 client: bucket does not exist' >&2\nexit 1\n"), 0o755); err != nil { //nolint:gosec // a test script
		t.Fatal(err)
	}
	pod := startPodMounter(t, bin, script)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := pod.mount(ctx, t, filepath.Join(dir, "source"), &handshake.Request{Bucket: "missing-bucket", MaxRead: mount.FUSEMaxRead})
	var merr *handshake.MounterError
	if !errors.As(err, &merr) || !strings.Contains(merr.Message, "bucket does not exist") {
		t.Fatalf("mount request error = %v, want the mounter's error with mount-s3's words", err)
	}
	if code := pod.exitCode(t); code != 1 {
		t.Fatalf("exit status %d, want 1; output:\n%s", code, pod.output.String())
	}
	msg, err := os.ReadFile(filepath.Join(pod.commDir, mppod.MountErrName))
	if err != nil || !strings.Contains(string(msg), "bucket does not exist") {
		t.Fatalf("mount.err = %q, %v", msg, err)
	}
}

// podMounter is the mounter of a Mountpoint Pod: `s3csi-mounter --comm-dir`, with the
// mount-s3 engine whose binary is script, or the built-in one when script is "".
type podMounter struct {
	commDir string
	proc    *os.Process
	output  *syncWriter
	exited  chan struct{}
	err     error // the exit status, once exited is closed
}

func startPodMounter(t testing.TB, bin, script string) *podMounter {
	t.Helper()
	commDir := filepath.Join(t.TempDir(), "comm")
	if err := os.Mkdir(commDir, 0o750); err != nil {
		t.Fatal(err)
	}
	p, _ := newPodMounter(t, bin, script, commDir, false)
	return p
}

// standbyPodMounter starts a mounter on an existing comm dir that waits to exec until start is
// called, as kubelet restarts a container.
//
// Problem: a test process whose threads read a FUSE mount whose server died cannot start a
// process until the reads end: fork waits on them.
// Solution: fork the next mounter (a shell waiting on its stdin) before the server dies; start
// lets it exec.
// Invariant: a test that kills a mounter under its own readers starts the next one with this.
func standbyPodMounter(t testing.TB, bin, script, commDir string) (p *podMounter, start func()) {
	t.Helper()
	return newPodMounter(t, bin, script, commDir, true)
}

func newPodMounter(t testing.TB, bin, script, commDir string, standby bool) (*podMounter, func()) {
	t.Helper()
	p := &podMounter{commDir: commDir, output: &syncWriter{}, exited: make(chan struct{})}
	cmd := exec.Command(bin, app.CommDirFlag+p.commDir)
	start := func() {}
	if standby {
		cmd = exec.Command("/bin/sh", "-c", `read -r _ && exec "$0" "$@"`, bin, app.CommDirFlag+p.commDir)
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		start = func() { _, _ = in.Write([]byte("start\n")) }
	}
	cmd.Env = os.Environ()
	if script != "" {
		cmd.Env = append(cmd.Env, app.EngineEnv+"="+app.EngineMountS3, app.MountS3PathEnv+"="+script)
	}
	cmd.Stdout, cmd.Stderr = p.output, p.output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.proc = cmd.Process
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p, start
}

// bucketRequest writes the profile files of s's credentials into the comm dir, as the
// node-agent does, and returns the mount request of s's bucket with args.
func (p *podMounter) bucketRequest(t testing.TB, s *testenv.S3, args ...string) *handshake.Request {
	t.Helper()
	const profile = "s3csi"
	configFile, credentialsFile := filepath.Join(mppod.CredentialsName, "config"), filepath.Join(mppod.CredentialsName, "credentials")
	if err := os.Mkdir(filepath.Join(p.commDir, mppod.CredentialsName), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		configFile:      fmt.Sprintf("[profile %s]\nregion = %s\n", profile, s.Region),
		credentialsFile: fmt.Sprintf("[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n", profile, s.AccessKey, s.SecretKey),
	} {
		if err := os.WriteFile(filepath.Join(p.commDir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return &handshake.Request{
		Bucket: s.Bucket, Args: args,
		Env:        []string{"AWS_PROFILE=" + profile, "AWS_REGION=" + s.Region, "AWS_ENDPOINT_URL=" + s.Endpoint},
		ConfigFile: configFile, CredentialsFile: credentialsFile, MaxRead: mount.FUSEMaxRead,
	}
}

// mount plays the node-agent: it mounts /dev/fuse on a new dir source and sends req with the
// descriptor over the pod's socket. The mount is removed when the test ends.
func (p *podMounter) mount(ctx context.Context, t *testing.T, source string, req *handshake.Request) error {
	t.Helper()
	dev := mountFUSE(t, source, false)
	defer func() { _ = dev.Close() }()
	return handshake.Send(ctx, filepath.Join(p.commDir, mppod.MountSockName), dev, req)
}

// keep plays the node-agent as a source is mounted: it mounts /dev/fuse on a new dir and keeps
// the connection (handshake.Keep) through the pod's mounter, with req and o. It returns the dir,
// and the Kept connection, closed when the test ends.
func (p *podMounter) keep(ctx context.Context, t testing.TB, readOnly bool, req *handshake.Request, o handshake.KeepOptions) (string, *handshake.Kept) {
	t.Helper()
	source := filepath.Join(t.TempDir(), "source")
	dev := mountFUSE(t, source, readOnly)
	kept, err := handshake.Keep(ctx, filepath.Join(p.commDir, mppod.MountSockName), os.Getuid(), dev, req, o)
	_ = dev.Close()
	if err != nil {
		t.Fatalf("mount request: %v; mounter output:\n%s", err, p.output.String())
	}
	t.Cleanup(kept.Close)
	return source, kept
}

// mountFUSE creates the dir source and mounts /dev/fuse on it, as the node-agent mounts a source;
// the mount is removed when the test ends.
func mountFUSE(t testing.TB, source string, readOnly bool) *os.File {
	t.Helper()
	if err := os.Mkdir(source, 0o750); err != nil {
		t.Fatal(err)
	}
	dev, err := mount.FUSE(source, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(source, syscall.MNT_DETACH) })
	return dev
}

// exitCode waits up to 15 s for the mounter to exit and returns its exit status.
func (p *podMounter) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("mounter still running after 15s; output:\n%s", p.output.String())
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		return exitErr.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("mounter: %v", p.err)
	}
	return 0
}
