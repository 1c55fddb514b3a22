package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/testenv"
)

// workloadUID is nobody: every program under test runs as it, and the mount gives it the files
// (--allow-other --uid --gid), so that root's privileges never hide a permission answer.
const workloadUID = 65534

// mounterEnv names a mounter binary to test instead of building this module's.
const mounterEnv = "S3CSI_CONFORMANCE_MOUNTER"

// env is one case's world: a bucket of its own, the case's mount of it, and a scratch directory
// for the programs' local inputs and outputs.
type env struct {
	t       *testing.T
	s3      *testenv.S3
	client  *s3.Client
	bin     string
	bucket  string
	base    string // mode 0755, so that nobody reaches the mount points and the scratch directory
	scratch string // owned by nobody
	m       *mount // the case's mount; more with e.mount
	mounts  []*mount
}

func newEnv(t *testing.T, server *testenv.S3, bin, bucket string, options []string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := server.CreateBucket(ctx, bucket); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
	base, err := os.MkdirTemp("", "s3csi-conformance-")
	if err != nil {
		t.Fatal(err)
	}
	// The mount table shows resolved paths (mounted compares with it).
	if base, err = filepath.EvalSymlinks(base); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, s3: server, client: server.RootClient(), bin: bin, bucket: bucket, base: base,
		scratch: filepath.Join(base, "scratch")}
	// Registered first, so it runs after every mount is gone; it never walks into a mount.
	t.Cleanup(e.removeBase)
	if err := os.Chmod(base, 0o755); err != nil { //nolint:gosec // nobody must reach the mounts
		t.Fatal(err)
	}
	if err := os.Mkdir(e.scratch, 0o755); err != nil { //nolint:gosec // nobody reads its inputs here
		t.Fatal(err)
	}
	if err := os.Chown(e.scratch, workloadUID, workloadUID); err != nil {
		t.Fatal(err)
	}
	e.m = e.mount(options...)
	return e
}

func (e *env) removeBase() {
	for _, m := range e.mounts {
		if mounted(m.dir) {
			e.t.Logf("%s is still mounted: leaving %s in place", m.dir, e.base)
			return
		}
	}
	_ = os.RemoveAll(e.base)
}

// mount is one s3csi-mounter process serving the case's bucket on a directory.
type mount struct {
	dir    string
	cmd    *exec.Cmd
	log    *testenv.SyncBuffer
	exited chan struct{}
}

// mount mounts the case's bucket once more: a second mount is another client on the same
// machine, as a second node's Mountpoint Pod is.
func (e *env) mount(options ...string) *mount {
	t := e.t
	t.Helper()
	dir, err := os.MkdirTemp(e.base, "mnt-")
	if err != nil {
		t.Fatal(err)
	}
	uid := strconv.Itoa(workloadUID)
	args := []string{"--endpoint-url", e.s3.Endpoint, "--region", e.s3.Region, "--force-path-style",
		"--allow-delete", "--allow-overwrite", "--allow-other", "--uid", uid, "--gid", uid}
	args = append(append(args, options...), e.bucket, dir)
	m := &mount{dir: dir, log: &testenv.SyncBuffer{}, exited: make(chan struct{})}
	m.cmd = exec.Command(e.bin, args...) //nolint:gosec // the binary under test
	m.cmd.Env = []string{"AWS_ACCESS_KEY_ID=" + e.s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + e.s3.SecretKey,
		"HOME=" + e.base, "PATH=" + workloadPath}
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", e.bin, err)
	}
	go func() {
		_ = m.cmd.Wait() // the exit status is not part of any case
		close(m.exited)
	}()
	e.mounts = append(e.mounts, m)
	t.Cleanup(func() { m.unmount(t) })
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(m.log.String(), "Serving bucket") || !mounted(dir) {
		select {
		case <-m.exited:
			t.Fatalf("s3csi-mounter %s exited before serving:\n%s", strings.Join(args, " "), m.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("s3csi-mounter did not serve %s within 30s:\n%s", dir, m.log.String())
		}
	}
	return m
}

// unmount ends the mount and its mounter, killing the mounter when it does not end by itself.
func (m *mount) unmount(t *testing.T) {
	if err := unix.Unmount(m.dir, 0); err != nil {
		_ = unix.Unmount(m.dir, unix.MNT_DETACH)
	}
	select {
	case <-m.exited:
	case <-time.After(15 * time.Second):
		m.kill()
		t.Errorf("s3csi-mounter still running 15s after the unmount of %s; killed it. Its log:\n%s", m.dir, tail(m.log.String(), 40))
	}
	if mounted(m.dir) {
		_ = unix.Unmount(m.dir, unix.MNT_DETACH)
	}
}

// kill ends the mounter at once: the kernel then aborts the FUSE connection, which frees every
// process blocked in a request of the mount.
func (m *mount) kill() {
	_ = m.cmd.Process.Kill()
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
	}
}

// killMounters frees a program blocked in a mount.
func (e *env) killMounters() {
	for _, m := range e.mounts {
		m.kill()
	}
}

// mounterLogs is the end of every mounter's log, for failure messages.
func (e *env) mounterLogs() string {
	var b strings.Builder
	for i, m := range e.mounts {
		fmt.Fprintf(&b, "mounter %d log (last lines):\n%s\n", i+1, tail(m.log.String(), 15))
	}
	return b.String()
}

// mounted reads the mount table rather than asking the filesystem: a statfs of a hung mount
// would hang the test.
func mounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if fields := strings.Fields(scanner.Text()); len(fields) > 4 && fields[4] == dir {
			return true
		}
	}
	return false
}

// path is a path in the case's mount.
func (e *env) path(rel string) string { return filepath.Join(e.m.dir, rel) }

// local writes a file in the scratch directory and returns its path.
func (e *env) local(name string, data []byte) string {
	e.t.Helper()
	p := filepath.Join(e.scratch, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // nobody reads it
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil { //nolint:gosec // nobody reads it
		e.t.Fatal(err)
	}
	return p
}

// put writes an object as another S3 client.
func (e *env) put(key string, data []byte) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	if _, err := e.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(e.bucket), Key: aws.String(key), Body: bytes.NewReader(data),
	}); err != nil {
		e.t.Fatalf("put %s: %v", key, err)
	}
}

// object reads an object from the bucket; ok is false when there is none.
func (e *env) object(key string) (data []byte, ok bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	out, err := e.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(key)})
	var noKey *types.NoSuchKey
	if errors.As(err, &noKey) {
		return nil, false
	}
	if err != nil {
		e.t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	data, err = io.ReadAll(out.Body)
	if err != nil {
		e.t.Fatalf("read %s: %v", key, err)
	}
	return data, true
}

// keys lists the bucket's keys under prefix.
func (e *env) keys(prefix string) []string {
	e.t.Helper()
	var keys []string
	pages := s3.NewListObjectsV2Paginator(e.client, &s3.ListObjectsV2Input{Bucket: aws.String(e.bucket), Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(e.t.Context())
		if err != nil {
			e.t.Fatalf("list %s: %v", prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	slices.Sort(keys)
	return keys
}

// wantObject fails the case unless the bucket holds exactly want under key.
func (e *env) wantObject(key string, want []byte) {
	e.t.Helper()
	got, ok := e.object(key)
	if !ok {
		e.fatalf("the bucket has no object %s; want %s", key, describe(want))
	}
	if !bytes.Equal(got, want) {
		e.fatalf("object %s holds %s; want %s", key, describe(got), difference(got, want))
	}
}

// eventuallyObject waits a little for an object: mount-s3 stores an empty file at the release
// that follows the last close, after close has returned.
func (e *env) eventuallyObject(key string, want []byte) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if got, ok := e.object(key); ok && bytes.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			e.wantObject(key, want)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantNoObject fails the case when the bucket holds key.
func (e *env) wantNoObject(key string) {
	e.t.Helper()
	if got, ok := e.object(key); ok {
		e.fatalf("the bucket holds %s (%s); want no such object", key, describe(got))
	}
}

// wantKeys fails the case unless the keys under prefix are exactly want.
func (e *env) wantKeys(prefix string, want ...string) {
	e.t.Helper()
	slices.Sort(want)
	if got := e.keys(prefix); !slices.Equal(got, want) {
		e.fatalf("keys under %q = %q; want %q", prefix, got, want)
	}
}

// eventuallyKeys is wantKeys for a listing that may hold empty files stored at their release,
// a moment after the program that wrote them ended (as mount-s3 stores them).
func (e *env) eventuallyKeys(prefix string, want ...string) {
	e.t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(e.keys(prefix), want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	e.wantKeys(prefix, want...)
}

// fatalf fails the case with the end of the mounters' logs.
func (e *env) fatalf(format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf(format+"\n%s", append(args, e.mounterLogs())...)
}

// describe names content briefly: small text quoted, anything else by size.
func describe(b []byte) string {
	if len(b) <= 64 {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%d bytes", len(b))
}

// difference says how got differs from want without printing megabytes.
func difference(got, want []byte) string {
	n := min(len(got), len(want))
	i := firstDifference(got, want)
	switch {
	case len(got) < len(want) && i == len(got):
		return fmt.Sprintf("%s: got only its first %d bytes", describe(want), len(got))
	case i == n:
		return fmt.Sprintf("%s: got %d bytes more", describe(want), len(got)-len(want))
	default:
		return fmt.Sprintf("%s: first difference at byte %d", describe(want), i)
	}
}

// firstDifference is the offset of the first byte where a and b differ, or the length of the
// shorter one.
func firstDifference(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// randomBytes is content that no other content of a case can match by chance.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
