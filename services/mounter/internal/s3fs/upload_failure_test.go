package s3fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// s3Operation names the S3 operation of a request to a path-style endpoint, for the operations
// an upload sends.
func s3Operation(r *http.Request) string {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPut && q.Has("uploadId"):
		return "UploadPart"
	case r.Method == http.MethodPut:
		return "PutObject"
	case r.Method == http.MethodPost && q.Has("uploads"):
		return "CreateMultipartUpload"
	case r.Method == http.MethodPost && q.Has("uploadId"):
		return "CompleteMultipartUpload"
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		return "AbortMultipartUpload"
	}
	return r.Method
}

// fault is an S3 error answered in place of the server.
type fault struct {
	status int
	code   string
	// ops are the operations answered with the error; none means every request.
	ops []string
	// times is how many requests are answered with the error; 0 means all of them.
	times int
}

// faultInjector answers chosen S3 operations with an error instead of forwarding them to the
// real server; everything else reaches the server unchanged.
type faultInjector struct {
	mu    sync.Mutex
	fault *fault
	hits  int
}

// set makes every later matching request fail as f describes; nil lets everything through.
func (fi *faultInjector) set(f *fault) {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	fi.fault, fi.hits = f, 0
}

// injected returns the number of requests answered with the current fault.
func (fi *faultInjector) injected() int {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	return fi.hits
}

func (fi *faultInjector) match(r *http.Request) *fault {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	f := fi.fault
	if f == nil || (f.times > 0 && fi.hits >= f.times) {
		return nil
	}
	op := s3Operation(r)
	for _, o := range f.ops {
		if o == op {
			fi.hits++
			return f
		}
	}
	if len(f.ops) == 0 {
		fi.hits++
		return f
	}
	return nil
}

// endpoint returns the URL of a proxy to the real server that injects the faults.
func (fi *faultInjector) endpoint(tb testing.TB, server string) string {
	return interceptEndpoint(tb, server, func(w http.ResponseWriter, r *http.Request) bool {
		f := fi.match(r)
		if f == nil {
			return false
		}
		// Read the body as a server does before it answers, so the client sees the error and
		// not a reset connection.
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(f.status)
		_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by the test</Message></Error>`, f.code)
		return true
	})
}

// writeAll writes data to f in 1 MiB writes and returns the first error.
func writeAll(f *os.File, data []byte) error {
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := f.Write(data[off:min(off+1<<20, len(data))]); err != nil {
			return err
		}
	}
	return nil
}

// pendingUploads returns the keys of the bucket's multipart uploads not completed nor aborted.
func pendingUploads(t *testing.T, s *testenv.S3) []string {
	t.Helper()
	out, err := s.RootClient().ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(s.Bucket)})
	if err != nil {
		t.Fatalf("list multipart uploads: %v", err)
	}
	keys := make([]string, 0, len(out.Uploads))
	for _, u := range out.Uploads {
		keys = append(keys, aws.ToString(u.Key))
	}
	return keys
}

// bucketKeys lists every key of the bucket.
func bucketKeys(t *testing.T, s *testenv.S3) []string {
	t.Helper()
	out, err := s.RootClient().ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket)})
	if err != nil {
		t.Fatalf("list objects: %v", err)
	}
	keys := make([]string, 0, len(out.Contents))
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// closer returns the close of fd, which closes it once; the test's end closes it if the test did
// not: a descriptor left open on the test's own mount would keep the mount, and the test process,
// from ending.
func closer(t *testing.T, fd int) func() error {
	var once sync.Once
	closeFD := func() error {
		var err error = syscall.EBADF
		once.Do(func() { err = syscall.Close(fd) })
		return err
	}
	t.Cleanup(func() { _ = closeFD() })
	return closeFD
}

// waitForgotten waits until the mount no longer holds the file being written at path: its
// release has run, and a lookup asks S3.
func waitForgotten(t *testing.T, path string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "the failed file to be forgotten by the mount", func() bool {
		_, err := os.Stat(path)
		return errors.Is(err, os.ErrNotExist)
	})
}

// TestFailedUploadsAreReportedAndLeaveNoObject answers the upload requests of a mount with S3
// errors: the application sees the error at write, fsync or close, every later fsync and close
// of the file reports it again, and the bucket holds no object and no open multipart upload.
func TestFailedUploadsAreReportedAndLeaveNoObject(t *testing.T) {
	s := testenv.StartS3(t)
	faults := &faultInjector{}
	opts := baseOptions(s)
	opts.EndpointURL = faults.endpoint(t, s.Endpoint)
	opts.WritePartSize = ptr[uint64](5 << 20)
	dir, _ := mountFS(t, s, opts, 10*time.Second)
	serverError := func(ops ...string) *fault {
		return &fault{status: http.StatusInternalServerError, code: "InternalError", ops: ops}
	}
	// Lookups still pass: the kernel looks a name up before it creates it.
	accessDenied := &fault{status: http.StatusForbidden, code: "AccessDenied", ops: []string{
		"PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "AbortMultipartUpload",
	}}

	tests := []struct {
		name  string
		fault *fault
		size  int
		// fsync calls fsync before close.
		fsync bool
		want  syscall.Errno
		// abortable: the fault lets AbortMultipartUpload through, so no upload may remain.
		abortable bool
	}{
		{name: "a small file whose PutObject fails with 500 fails close with EIO",
			fault: serverError("PutObject"), size: 100, want: syscall.EIO, abortable: true},
		{name: "a large file whose parts fail with 500 fails with EIO and the upload is aborted",
			fault: serverError("UploadPart"), size: 16 << 20, want: syscall.EIO, abortable: true},
		{name: "a large file whose CreateMultipartUpload fails with 500 fails with EIO",
			fault: serverError("CreateMultipartUpload"), size: 16 << 20, want: syscall.EIO, abortable: true},
		{name: "a large file whose CompleteMultipartUpload fails with 500 fails close with EIO and the upload is aborted",
			fault: serverError("CompleteMultipartUpload"), size: 12 << 20, want: syscall.EIO, abortable: true},
		{name: "a small file refused with 403 fails close with EACCES",
			fault: accessDenied, size: 100, want: syscall.EACCES},
		{name: "a large file refused with 403 mid-upload fails with EACCES",
			fault: accessDenied, size: 16 << 20, want: syscall.EACCES},
		{name: "a failed small upload is reported by fsync and again by close",
			fault: serverError("PutObject"), size: 100, fsync: true, want: syscall.EIO, abortable: true},
		{name: "a failed part upload is reported by fsync and again by close",
			fault: serverError("UploadPart"), size: 12 << 20, fsync: true, want: syscall.EIO, abortable: true},
		// An empty file is stored by fsync or by the release after its last close (a shell's
		// close of the descriptor it duplicated onto stdout must not end the file), so its
		// failure is reported by fsync.
		{name: "an empty new file refused with 403 is reported by fsync with EACCES and again by close",
			fault: accessDenied, fsync: true, want: syscall.EACCES},
		{name: "an empty new file whose PutObject fails is reported by fsync and again by close",
			fault: serverError("PutObject"), fsync: true, want: syscall.EIO, abortable: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("failed-%d", i)
			path := filepath.Join(dir, key)
			faults.set(tt.fault)
			defer faults.set(nil)
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			// A descriptor left open on a failed test would keep the mount from going away.
			defer f.Close()
			// The error may surface at a write (a part failed in the background) or only at
			// the end; once seen, every later fsync and close must report it too.
			errs := []error{writeAll(f, pattern(tt.size, uint64(i)))}
			if tt.fsync {
				errs = append(errs, f.Sync())
				wantErrno(t, "fsync", errs[len(errs)-1], tt.want)
			}
			closeErr := f.Close()
			errs = append(errs, closeErr)
			var first error
			for _, err := range errs {
				if err != nil {
					first = err
					break
				}
			}
			wantErrno(t, "first error of write, fsync and close", first, tt.want)
			wantErrno(t, "close", closeErr, tt.want)
			if faults.injected() == 0 {
				t.Fatal("no request met the fault: the test checks nothing")
			}
			// Nothing is written once the application was told it failed, also when S3 answers
			// again before the kernel releases the file.
			faults.set(nil)
			waitForgotten(t, path)
			bucketHas(t, s, key, nil)
			if tt.abortable {
				if slices.Contains(pendingUploads(t, s), key) {
					t.Fatalf("a multipart upload of %s remains, want it aborted", key)
				}
			}
		})
	}
	if keys := bucketKeys(t, s); len(keys) != 0 {
		t.Fatalf("bucket holds %q after failed uploads, want nothing", keys)
	}
}

// TestEveryCloseOfADuplicatedDescriptorReportsTheFailure closes the descriptors of one open file
// one after the other: none claims success once the upload failed.
func TestEveryCloseOfADuplicatedDescriptorReportsTheFailure(t *testing.T) {
	s := testenv.StartS3(t)
	faults := &faultInjector{}
	opts := baseOptions(s)
	opts.EndpointURL = faults.endpoint(t, s.Endpoint)
	dir, _ := mountFS(t, s, opts, 10*time.Second)
	for _, size := range []int{1, 100} {
		t.Run(fmt.Sprintf("%d bytes", size), func(t *testing.T) {
			key := fmt.Sprintf("dup-%d", size)
			faults.set(&fault{status: http.StatusInternalServerError, code: "InternalError", ops: []string{"PutObject"}})
			defer faults.set(nil)
			fd, err := syscall.Open(filepath.Join(dir, key), syscall.O_CREAT|syscall.O_WRONLY|syscall.O_EXCL, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			closeFD := closer(t, fd)
			if _, err := syscall.Write(fd, pattern(size, 9)); err != nil {
				t.Fatal(err)
			}
			dup, err := syscall.Dup(fd)
			if err != nil {
				t.Fatal(err)
			}
			closeDup := closer(t, dup)
			wantErrno(t, "close of the first descriptor", closeFD(), syscall.EIO)
			wantErrno(t, "close of the duplicate", closeDup(), syscall.EIO)
			faults.set(nil)
			waitForgotten(t, filepath.Join(dir, key))
			bucketHas(t, s, key, nil)
		})
	}
}

// TestWritesThroughADuplicateAfterTheFirstCloseAreUploaded is what a shell does for `cmd > f`:
// open, duplicate onto stdout, close the original, write through the duplicate. Closing the
// empty file's first descriptor must not end the file.
func TestWritesThroughADuplicateAfterTheFirstCloseAreUploaded(t *testing.T) {
	s := testenv.StartS3(t)
	dir, _ := mountFS(t, s, baseOptions(s), 10*time.Second)
	fd, err := syscall.Open(filepath.Join(dir, "redirected"), syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	closeFD := closer(t, fd)
	dup, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	closeDup := closer(t, dup)
	if err := closeFD(); err != nil {
		t.Fatalf("close of the empty file's first descriptor: %v", err)
	}
	if _, err := syscall.Write(dup, []byte("through the duplicate")); err != nil {
		t.Fatalf("write through the duplicate: %v", err)
	}
	if err := closeDup(); err != nil {
		t.Fatalf("close of the duplicate: %v", err)
	}
	bucketHas(t, s, "redirected", []byte("through the duplicate"))
}

// TestTransientServerErrorsAreRetried fails a few upload requests once: the SDK retries them,
// close succeeds, and the object holds exactly the bytes written.
func TestTransientServerErrorsAreRetried(t *testing.T) {
	s := testenv.StartS3(t)
	faults := &faultInjector{}
	opts := baseOptions(s)
	opts.EndpointURL = faults.endpoint(t, s.Endpoint)
	opts.WritePartSize = ptr[uint64](5 << 20)
	dir, _ := mountFS(t, s, opts, 30*time.Second)
	for _, op := range []string{"PutObject", "UploadPart", "CompleteMultipartUpload"} {
		t.Run(op, func(t *testing.T) {
			size := 12 << 20
			if op == "PutObject" {
				size = 1000
			}
			data := pattern(size, 11)
			faults.set(&fault{status: http.StatusServiceUnavailable, code: "SlowDown", ops: []string{op}, times: 2})
			defer faults.set(nil)
			if err := os.WriteFile(filepath.Join(dir, "retried-"+op), data, 0o644); err != nil {
				t.Fatalf("write with %s failing twice: %v", op, err)
			}
			if faults.injected() != 2 {
				t.Fatalf("%d requests met the fault, want 2", faults.injected())
			}
			bucketHas(t, s, "retried-"+op, data)
		})
	}
}

// TestStoppedServerMidUploadFailsTheFile stops the S3 server while a large file is written:
// the application sees EIO, the object never appears, and once the server is back the mount
// writes again.
func TestStoppedServerMidUploadFailsTheFile(t *testing.T) {
	s := testenv.StartS3(t)
	opts := baseOptions(s)
	opts.WritePartSize = ptr[uint64](5 << 20)
	dir, _ := mountFS(t, s, opts, 2*time.Second)
	f, err := os.Create(filepath.Join(dir, "interrupted.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := writeAll(f, pattern(11<<20, 12)); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	writeErr := writeAll(f, pattern(11<<20, 13))
	closeErr := f.Close()
	if writeErr != nil {
		wantErrno(t, "write after the server stopped", writeErr, syscall.EIO)
	}
	wantErrno(t, "close after the server stopped", closeErr, syscall.EIO)

	if err := s.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	bucketHas(t, s, "interrupted.bin", nil)
	if keys := bucketKeys(t, s); len(keys) != 0 {
		t.Fatalf("bucket holds %q, want nothing", keys)
	}
	// The abort could not reach the server: the upload stays open, never completed.
	t.Logf("multipart uploads left open by the outage: %q", pendingUploads(t, s))
	data := pattern(6<<20, 14)
	if err := os.WriteFile(filepath.Join(dir, "after.bin"), data, 0o644); err != nil {
		t.Fatalf("write once the server is back: %v", err)
	}
	bucketHas(t, s, "after.bin", data)
}

// switchedCredentials are credentials a test replaces while the mount uses them; the client asks
// for them before every request.
type switchedCredentials struct {
	current atomic.Pointer[aws.Credentials]
}

func (c *switchedCredentials) set(accessKey, secretKey string) {
	c.current.Store(&aws.Credentials{AccessKeyID: accessKey, SecretAccessKey: secretKey})
}

func (c *switchedCredentials) Retrieve(context.Context) (aws.Credentials, error) {
	creds := *c.current.Load()
	creds.CanExpire, creds.Expires = true, time.Now()
	return creds, nil
}

// TestRevokedCredentialsMidUploadFailTheFile signs the requests of a large file's upload with a
// key the server does not know from the middle of the upload on: the server refuses them, the
// application sees EACCES and no object appears.
func TestRevokedCredentialsMidUploadFailTheFile(t *testing.T) {
	s := testenv.StartS3(t)
	writeErr, closeErr := revokeMidUpload(t, s, baseOptions(s), "revoked.bin")
	if writeErr != nil {
		wantErrno(t, "write with revoked credentials", writeErr, syscall.EACCES)
	}
	wantErrno(t, "close with revoked credentials", closeErr, syscall.EACCES)
	bucketHas(t, s, "revoked.bin", nil)
	if keys := bucketKeys(t, s); len(keys) != 0 {
		t.Fatalf("bucket holds %q, want nothing", keys)
	}
}

// TestARefusalThatResetsTheUploadIsReportedAsARefusal plays a server that refuses a part from
// its headers (the key was revoked mid-upload) and drops the connection without reading the
// body, as versitygw does: the client sees a reset, never the refusal. The application must
// still see EACCES, from the listing the mounter then makes, and no object appears.
func TestARefusalThatResetsTheUploadIsReportedAsARefusal(t *testing.T) {
	s := testenv.StartS3(t)
	var resets atomic.Int32
	opts := baseOptions(s)
	opts.EndpointURL = interceptEndpoint(t, s.Endpoint, func(w http.ResponseWriter, r *http.Request) bool {
		if s3Operation(r) != "UploadPart" || !strings.Contains(r.Header.Get("Authorization"), "REVOKED") {
			return false
		}
		resets.Add(1)
		resetConnection(t, w)
		return true
	})
	writeErr, closeErr := revokeMidUpload(t, s, opts, "refused.bin")
	if resets.Load() == 0 {
		t.Fatal("no part was sent with the revoked key")
	}
	if writeErr != nil {
		wantErrno(t, "write refused with a reset", writeErr, syscall.EACCES)
	}
	wantErrno(t, "close refused with a reset", closeErr, syscall.EACCES)
	if keys := bucketKeys(t, s); len(keys) != 0 {
		t.Fatalf("bucket holds %q, want nothing", keys)
	}
}

// revokeMidUpload mounts with opts (5 MiB parts) under s's key, writes 11 MiB of file name,
// then signs with a key the server does not know ("REVOKED" and s's key), writes 11 MiB more and
// closes the file. It returns the errors of that second write and of the close.
func revokeMidUpload(t *testing.T, s *testenv.S3, opts mountargs.Options, name string) (writeErr, closeErr error) {
	t.Helper()
	requireFUSE(t)
	creds := &switchedCredentials{}
	creds.set(s.AccessKey, s.SecretKey)
	opts.WritePartSize = ptr[uint64](5 << 20)
	dir := t.TempDir()
	m, err := Mount(t.Context(), dir, Config{Options: opts, Credentials: creds, RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountFS(t, dir, m) })
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := writeAll(f, pattern(11<<20, 15)); err != nil {
		t.Fatal(err)
	}
	creds.set("REVOKED"+s.AccessKey, s.SecretKey)
	writeErr = writeAll(f, pattern(11<<20, 16))
	return writeErr, f.Close()
}

// TestAResetUploadWithValidKeysIsNotReportedAsARefusal resets every part upload while the key
// stays valid: the listing the mounter makes after the reset succeeds, so the file fails with
// an I/O error, not with EACCES, which would send the operator after the wrong cause.
func TestAResetUploadWithValidKeysIsNotReportedAsARefusal(t *testing.T) {
	s := testenv.StartS3(t)
	opts := baseOptions(s)
	opts.EndpointURL = interceptEndpoint(t, s.Endpoint, func(w http.ResponseWriter, r *http.Request) bool {
		if s3Operation(r) != "UploadPart" {
			return false
		}
		resetConnection(t, w)
		return true
	})
	opts.WritePartSize = ptr[uint64](5 << 20)
	dir, _ := mountFS(t, s, opts, 10*time.Second)
	f, err := os.Create(filepath.Join(dir, "reset.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	writeErr := writeAll(f, pattern(11<<20, 20))
	closeErr := f.Close()
	for what, err := range map[string]error{"write": writeErr, "close": closeErr} {
		if errors.Is(err, syscall.EACCES) {
			t.Errorf("%s of a reset upload with valid keys: %v, want an error other than EACCES", what, err)
		}
	}
	if closeErr == nil {
		t.Fatal("close of a file none of whose parts was stored succeeded")
	}
}

// resetConnection drops the request's connection at once, its body unread, with a TCP reset.
func resetConnection(t *testing.T, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack the connection: %v", err)
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// TestInterruptedWriteLosesNothing signals a thread whose write waits for a free upload slot
// (every slot holds a part the server has not answered yet): the kernel turns the signal into a
// FUSE interrupt. The write must not fail for it, since its bytes are already taken and the
// file could not be completed any more: the write returns once a slot frees, and the object
// holds every byte.
func TestInterruptedWriteLosesNothing(t *testing.T) {
	s := testenv.StartS3(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseParts := func() { releaseOnce.Do(func() { close(release) }) }
	var held atomic.Int32
	opts := baseOptions(s)
	opts.EndpointURL = interceptEndpoint(t, s.Endpoint, func(_ http.ResponseWriter, r *http.Request) bool {
		if s3Operation(r) == "UploadPart" {
			held.Add(1)
			<-release
		}
		return false
	})
	// The proxy must let the held requests go before the mount is unmounted.
	t.Cleanup(releaseParts)
	const part = 5 << 20
	opts.WritePartSize = ptr[uint64](part)
	dir, _ := mountFS(t, s, opts, 30*time.Second)
	f, err := os.Create(filepath.Join(dir, "interrupted.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := pattern((maxPartsInFlight+1)*part, 17)
	last := len(data) - 1<<20
	if err := writeAll(f, data[:last]); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "every upload slot held by the server", func() bool {
		return held.Load() == maxPartsInFlight
	})

	tids, done := make(chan int, 1), make(chan error, 1)
	go func() {
		// The write runs on a known thread, and without the retry on EINTR that os.File does.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		_, err := syscall.Pwrite(int(f.Fd()), data[last:], int64(last))
		done <- err
	}()
	tid := <-tids
	var writeErr error
	interrupted := false
	for range 50 {
		_ = unix.Tgkill(os.Getpid(), tid, unix.SIGURG) // the Go runtime ignores a stray SIGURG
		select {
		case writeErr = <-done:
			interrupted = true
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	releaseParts()
	if !interrupted {
		writeErr = <-done
	}
	if writeErr != nil {
		t.Fatalf("interrupted write: %v, want it to wait for a free slot", writeErr)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	bucketHas(t, s, "interrupted.bin", data)
}

// TestFailedOverwriteKeepsThePreviousObject fails the upload of an object's new version: the
// application sees EIO and the bucket still holds the previous version.
func TestFailedOverwriteKeepsThePreviousObject(t *testing.T) {
	s := testenv.StartS3(t)
	putObject(t, s, "kept.txt", []byte("previous"))
	faults := &faultInjector{}
	opts := baseOptions(s)
	opts.EndpointURL = faults.endpoint(t, s.Endpoint)
	opts.AllowOverwrite = true
	dir, _ := mountFS(t, s, opts, 10*time.Second)
	faults.set(&fault{status: http.StatusInternalServerError, code: "InternalError", ops: []string{"PutObject"}})
	err := os.WriteFile(filepath.Join(dir, "kept.txt"), []byte("replacement"), 0o644)
	wantErrno(t, "overwrite", err, syscall.EIO)
	faults.set(nil)
	bucketHas(t, s, "kept.txt", []byte("previous"))
}
