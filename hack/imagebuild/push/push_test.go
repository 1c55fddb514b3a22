package push

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

// anonymous is a keychain with no credentials: tests never read the machine's Docker config.
var anonymous = authn.NewMultiKeychain()

func randomIndex(t *testing.T) v1.ImageIndex {
	t.Helper()
	idx, err := random.Index(64, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestLoopback(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"localhost:5000", true},
		{"LocalHost:5000", true},
		{"127.0.0.1", true},
		{"127.0.0.1:5000", true},
		{"127.1.2.3:5000", true},
		{"[::1]:5000", true},
		{"::1", true},
		{"10.0.0.1:5000", false},
		{"172.16.0.1", false},
		{"192.168.1.10:5000", false},
		{"128.0.0.1", false},
		{"0.0.0.0:5000", false},
		{"[::2]:5000", false},
		{"registry.local:5000", false},
		{"localhost.example.com", false},
		{"ghcr.io", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			if got := Loopback(tc.host); got != tc.want {
				t.Errorf("Loopback(%q) = %v, want %v", tc.host, got, tc.want)
			}
		})
	}
}

func TestRepository(t *testing.T) {
	for _, tc := range []struct {
		name, registry, want, wantScheme, wantErr string
	}{
		{"a public registry is spoken to in HTTPS", "ghcr.io/s3csi", "ghcr.io/s3csi/controller", "https", ""},
		{"a trailing slash is ignored", "ghcr.io/s3csi/", "ghcr.io/s3csi/controller", "https", ""},
		{"a loopback registry may be plain HTTP", "127.0.0.1:5000/s3csi", "127.0.0.1:5000/s3csi/controller", "http", ""},
		{"localhost may be plain HTTP", "localhost:5000/a/b", "localhost:5000/a/b/controller", "http", ""},
		{"no registry is a usage error", "", "", "", "no registry"},
		{"a scheme is refused", "http://ghcr.io/s3csi", "", "", "without a scheme"},
		{"a prefix without a host is refused", "s3csi", "", "", "registry"},
		{"upper case is refused", "ghcr.io/S3CSI", "", "", "registry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo, err := Options{Registry: tc.registry}.Repository("controller")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if repo.String() != tc.want || repo.Scheme() != tc.wantScheme {
				t.Errorf("repository %s (%s), want %s (%s)", repo, repo.Scheme(), tc.want, tc.wantScheme)
			}
		})
	}
}

// recorder is a transport that records each request's URL and answers none: nothing leaves the
// process.
type recorder struct {
	mu   sync.Mutex
	urls []string
}

var errRecorded = errors.New("recorded, not sent")

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.urls = append(r.urls, req.URL.Scheme+"://"+req.URL.Host+req.URL.Path)
	return nil, errRecorded
}

func TestOnlyALoopbackRegistryIsSpokenToInPlainHTTP(t *testing.T) {
	// go-containerregistry on its own speaks plain HTTP to RFC 1918 addresses and *.local names.
	for _, tc := range []struct {
		registry  string
		wantPlain bool
	}{
		{"10.1.2.3:5000/s3csi", false},
		{"192.168.1.10/s3csi", false},
		{"registry.local:5000/s3csi", false},
		{"ghcr.io/s3csi", false},
		{"127.0.0.1:5000/s3csi", true},
	} {
		t.Run(tc.registry, func(t *testing.T) {
			rec := &recorder{}
			o := Options{Registry: tc.registry, Keychain: anonymous, Transport: rec}
			if _, err := Index(context.Background(), o, "controller", randomIndex(t), "1.0.0", nil); err == nil {
				t.Fatal("a push through a transport that sends nothing succeeded")
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.urls) == 0 {
				t.Fatal("the push sent no request")
			}
			plain := false
			for _, u := range rec.urls {
				plain = plain || strings.HasPrefix(u, "http://")
			}
			if plain != tc.wantPlain {
				t.Errorf("requests %v: plain HTTP used %v, want %v", rec.urls, plain, tc.wantPlain)
			}
		})
	}
}

func TestARefusedPushNamesTheRegistryAndItsAnswer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	answering := func(status int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	for _, tc := range []struct {
		name, host string
		want       []string
	}{
		{"a closed port", closed, []string{closed, "connection refused"}},
		{"a registry answering 401", answering(http.StatusUnauthorized, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`),
			[]string{"401 Unauthorized"}},
		{"a registry answering 403", answering(http.StatusForbidden, `{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}`),
			[]string{"HTTP 403 Forbidden", "DENIED", "requested access to the resource is denied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Registry: tc.host + "/s3csi", Keychain: anonymous}
			_, err := Index(context.Background(), o, "controller", randomIndex(t), "1.0.0", nil)
			if err == nil {
				t.Fatal("the push succeeded")
			}
			t.Log(err)
			for _, w := range append([]string{"registry " + tc.host, tc.host + "/s3csi/controller:1.0.0"}, tc.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}
