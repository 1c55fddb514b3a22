package s3fs

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/s3csi/s3csi/shared/testenv"
	"github.com/s3csi/s3csi/shared/version"
)

// sha256Hex is a signed payload hash, as opposed to UNSIGNED-PAYLOAD.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// TestUploadsAreCoveredByASignedChecksum watches the upload requests a mount sends (a small file
// is one PutObject, a 20 MiB one a multipart upload of three parts): with CRC32C checksums the
// payload goes unsigned under a signed CRC32C header, as mount-s3 sends it; with
// --upload-checksums=off the payload itself is signed.
func TestUploadsAreCoveredByASignedChecksum(t *testing.T) {
	s := testenv.StartS3(t)
	tests := []struct {
		name      string
		checksums string
		want      func(t *testing.T, payload, crc32c string)
	}{
		{name: "with CRC32C the payload is unsigned under the checksum", want: func(t *testing.T, payload, crc32c string) {
			if payload != "UNSIGNED-PAYLOAD" || crc32c == "" {
				t.Errorf("x-amz-content-sha256 %q, x-amz-checksum-crc32c %q: want UNSIGNED-PAYLOAD and a checksum", payload, crc32c)
			}
		}},
		{name: "without checksums the payload is signed", checksums: "off", want: func(t *testing.T, payload, crc32c string) {
			if !sha256Hex.MatchString(payload) || crc32c != "" {
				t.Errorf("x-amz-content-sha256 %q, x-amz-checksum-crc32c %q: want a SHA-256 and no checksum", payload, crc32c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			type upload struct{ payload, crc32c string }
			var uploads []upload
			opts := baseOptions(s)
			opts.UploadChecksums = tt.checksums
			opts.EndpointURL = proxyEndpoint(t, s.Endpoint, func(r *http.Request) {
				if r.Method == http.MethodPut {
					mu.Lock()
					defer mu.Unlock()
					uploads = append(uploads, upload{r.Header.Get("X-Amz-Content-Sha256"), r.Header.Get("X-Amz-Checksum-Crc32c")})
				}
			})
			dir, _ := mountFS(t, s, opts, 30*time.Second)
			if err := os.WriteFile(filepath.Join(dir, "small-"+tt.checksums), []byte("small"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "large-"+tt.checksums), pattern(20<<20, 7), 0o644); err != nil {
				t.Fatal(err)
			}
			bucketHas(t, s, "large-"+tt.checksums, pattern(20<<20, 7))
			mu.Lock()
			defer mu.Unlock()
			if len(uploads) != 4 {
				t.Fatalf("saw %d upload requests, want 4 (one PutObject, three parts)", len(uploads))
			}
			for _, u := range uploads {
				tt.want(t, u.payload, u.crc32c)
			}
		})
	}
}

// TestRequestsNameTheMounterAndItsVersion checks that every request a mount sends carries
// s3csi-mounter/<version> in its User-Agent, so the endpoint's logs tell which driver sent it.
func TestRequestsNameTheMounterAndItsVersion(t *testing.T) {
	s := testenv.StartS3(t)
	var mu sync.Mutex
	var agents []string
	opts := baseOptions(s)
	opts.EndpointURL = proxyEndpoint(t, s.Endpoint, func(r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		agents = append(agents, r.Header.Get("User-Agent"))
	})
	dir, _ := mountFS(t, s, opts, 30*time.Second)
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(agents) == 0 {
		t.Fatal("saw no request")
	}
	want := userAgentKey + "/" + version.Version
	for _, ua := range agents {
		if !strings.Contains(ua, want) {
			t.Errorf("User-Agent %q lacks %q", ua, want)
		}
	}
}
