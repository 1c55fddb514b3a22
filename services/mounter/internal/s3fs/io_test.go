package s3fs

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// pattern returns n deterministic pseudo-random bytes.
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed)})
	_, _ = r.Read(b)
	return b
}

func TestLargeFileWriteAndRandomReads(t *testing.T) {
	s := testenv.StartS3(t)
	opts := baseOptions(s)
	opts.WritePartSize = ptr[uint64](5 << 20)
	opts.ReadPartSize = ptr[uint64](1 << 20)
	dir, m := mountFS(t, s, opts, 30*time.Second)
	const size = 256<<20 + 12345
	data := pattern(size, 1)

	f, err := os.Create(filepath.Join(dir, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < size; off += 1 << 20 {
		if _, err := f.Write(data[off:min(off+1<<20, size)]); err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	// The posix backend stores the object as a plain file: compare it whole.
	stored, err := os.ReadFile(filepath.Join(s.Dir, s.Bucket, "big.bin"))
	if err != nil || sha256.Sum256(stored) != sha256.Sum256(data) {
		t.Fatalf("stored object differs from what was written (%d bytes, %v)", len(stored), err)
	}

	got, err := os.ReadFile(filepath.Join(dir, "big.bin"))
	if err != nil || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("sequential read differs (%d bytes, %v)", len(got), err)
	}

	r, err := os.Open(filepath.Join(dir, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3<<20)
	for i := range 200 {
		// Around part boundaries of both part sizes, and anywhere.
		off := int64(rng.IntN(size))
		if i%2 == 0 {
			off = int64(rng.IntN(size/(1<<20))<<20) - int64(rng.IntN(4096))
		}
		off = max(off, 0)
		n, err := r.ReadAt(buf[:1+rng.IntN(len(buf))], off)
		if err != nil && err != io.EOF {
			t.Fatalf("pread at %d: %v", off, err)
		}
		if !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
			t.Fatalf("pread of %d bytes at %d differs", n, off)
		}
	}
	if st := m.Stats(); st.PeakBufferBytes > st.BufferLimit {
		t.Fatalf("buffers peaked at %d bytes, over the limit %d", st.PeakBufferBytes, st.BufferLimit)
	}
}

func TestConcurrentReadersStayWithinMemoryTarget(t *testing.T) {
	s := testenv.StartS3(t)
	const size = 24 << 20
	data := pattern(size, 2)
	putObject(t, s, "shared.bin", data)
	opts := baseOptions(s)
	opts.MaxMemoryTarget = ptr[uint64](64)
	opts.ReadPartSize = ptr[uint64](2 << 20)
	dir, m := mountFS(t, s, opts, 30*time.Second)
	want := sha256.Sum256(data)

	const readers = 50
	errs := make(chan error, readers)
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			f, err := os.OpenFile(filepath.Join(dir, "shared.bin"), os.O_RDONLY|syscall.O_DIRECT, 0)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			h := sha256.New()
			if _, err := io.CopyBuffer(h, f, make([]byte, 1<<20)); err != nil {
				errs <- err
				return
			}
			if [32]byte(h.Sum(nil)) != want {
				errs <- io.ErrUnexpectedEOF
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("reader: %v", err)
	}
	st := m.Stats()
	if st.PeakBufferBytes > 64<<20 || st.PeakBufferBytes == 0 {
		t.Fatalf("buffers peaked at %d bytes, want (0, 64 MiB]", st.PeakBufferBytes)
	}
	t.Logf("peak buffer bytes with %d readers: %d", readers, st.PeakBufferBytes)
}

func TestLostEndpointFailsReadsWithEIO(t *testing.T) {
	s := testenv.StartS3(t)
	const size = 64 << 20
	putObject(t, s, "far.bin", pattern(size, 3))
	opts := baseOptions(s)
	opts.ReadPartSize = ptr[uint64](1 << 20)
	dir, _ := mountFS(t, s, opts, 2*time.Second)
	f, err := os.Open(filepath.Join(dir, "far.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() {
		_, err := f.ReadAt(make([]byte, 4096), size-(8<<20))
		result <- err
	}()
	select {
	case err := <-result:
		wantErrno(t, "read after the endpoint went away", err, syscall.EIO)
	case <-time.After(20 * time.Second):
		t.Fatal("read still blocked 20s after the endpoint went away (request timeout 2s)")
	}
}

func TestCredentialRotationWithoutRemount(t *testing.T) {
	requireFUSE(t)
	s := testenv.StartS3(t)
	putObject(t, s, "secret.txt", []byte("rotated"))
	credFile := filepath.Join(t.TempDir(), "credentials")
	// Rotation replaces the key pair. (The SDK's signer caches derived signing keys per access key
	// id for a day, so a new secret under the same id is seen only the next day.)
	writeProfile := func(accessKey string) {
		body := "[default]\naws_access_key_id = " + accessKey + "\naws_secret_access_key = " + s.SecretKey + "\n"
		if err := os.WriteFile(credFile, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeProfile(s.AccessKey)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", credFile)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "config"))
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	dir := t.TempDir()
	cfg := Config{Options: baseOptions(s), Credentials: NewReloadingCredentials(""), RequestTimeout: 10 * time.Second}
	m, err := Mount(t.Context(), dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountFS(t, dir, m) })

	// The key is revoked: once the file is re-read, S3 refuses every request. (A fresh name
	// each time: a lookup's answer is cached.)
	writeProfile("OLD" + s.AccessKey)
	probe := 0
	testenv.Eventually(t, 10*time.Second, "a lookup refused with the revoked key", func() bool {
		probe++
		_, err := os.Stat(filepath.Join(dir, fmt.Sprintf("probe-%d", probe)))
		return errors.Is(err, syscall.EACCES)
	})
	_, err = os.ReadFile(filepath.Join(dir, "secret.txt"))
	wantErrno(t, "read with a revoked key", err, syscall.EACCES)
	writeProfile(s.AccessKey)
	var got []byte
	testenv.Eventually(t, 10*time.Second, "a read with the rotated credentials", func() bool {
		got, err = os.ReadFile(filepath.Join(dir, "secret.txt"))
		return err == nil
	})
	if string(got) != "rotated" {
		t.Fatalf("read %q after rotation", got)
	}
}

func TestListingPagesAndCaches(t *testing.T) {
	s := testenv.StartS3(t)
	const files = 2500
	root := filepath.Join(s.Dir, s.Bucket, "many")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	// The posix backend serves plain files as objects: create them directly for speed.
	for i := range files {
		name := filepath.Join(root, fmt.Sprintf("f%05d", i))
		if err := os.WriteFile(name, []byte(strconv.Itoa(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := baseOptions(s)
	opts.MetadataTTL = &mountargs.TTL{Duration: time.Minute}
	dir, _ := mountFS(t, s, opts, 30*time.Second)
	entries, err := os.ReadDir(filepath.Join(dir, "many"))
	if err != nil || len(entries) != files {
		t.Fatalf("listed %d entries (%v), want %d", len(entries), err, files)
	}
	info, err := entries[files-1].Info()
	if err != nil || info.Size() != int64(len(strconv.Itoa(files-1))) {
		t.Fatalf("last entry info %v, %v", info, err)
	}
}

func ptr[T any](v T) *T { return &v }
