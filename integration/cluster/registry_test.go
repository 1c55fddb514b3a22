package cluster

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// The cluster's registry takes an image index as `make push` sends it, serves it back by tag,
// and gives it the content tag TagImage adds; its blobs are files under its directory.
func TestTheRegistryServesWhatIsPushedAndTagged(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeRegistry(ctx, addr, dir, "u:secret") }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("registry: %v", err)
		}
	})

	idx, err := random.Index(1024, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(addr+"/s3csi/controller:0.1.0", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = remote.WriteIndex(ref, idx, remote.WithContext(ctx))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the registry is starting
	}
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	d, err := remote.Get(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pull back: %v", err)
	}
	want, _ := idx.Digest()
	if d.Digest != want {
		t.Fatalf("pulled digest %s, pushed %s", d.Digest, want)
	}
	c := Config{RegistryPort: addr2port(t, addr)}
	if err := c.TagImage(ctx, "controller", d, "0.1.0-0123456789ab"); err != nil {
		t.Fatal(err)
	}
	tagged, err := remote.Head(ref.Context().Tag("0.1.0-0123456789ab"), remote.WithContext(ctx))
	if err != nil || tagged.Digest != want {
		t.Fatalf("the content tag names %v (%v), want %s", tagged, err, want)
	}
	blobs, err := filepath.Glob(filepath.Join(dir, "*", "*"))
	if err != nil || len(blobs) == 0 {
		entries, _ := os.ReadDir(dir)
		t.Errorf("no blob files under the registry's directory: %v %v", entries, err)
	}
}

func addr2port(t *testing.T, addr string) int {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return a.Port
}

// The private part of the registry refuses a pull without its credentials or with wrong ones,
// as a private registry does, and serves one with them.
func TestThePrivatePartOfTheRegistryNeedsItsCredentials(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeRegistry(ctx, addr, t.TempDir(), "u:secret") }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("registry: %v", err)
		}
	})
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(addr+"/"+PrivatePrefix+"/s3csi/mounter:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	good := remote.WithAuth(&authn.Basic{Username: "u", Password: "secret"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = remote.Write(ref, img, good, remote.WithContext(ctx))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the registry is starting
	}
	if err != nil {
		t.Fatalf("push with the credentials: %v", err)
	}
	if _, err := remote.Head(ref, good, remote.WithContext(ctx)); err != nil {
		t.Errorf("pull with the credentials: %v", err)
	}
	for name, auth := range map[string]authn.Authenticator{
		"without credentials":   authn.Anonymous,
		"with a wrong password": &authn.Basic{Username: "u", Password: "wrong"},
	} {
		var terr *transport.Error
		if _, err := remote.Head(ref, remote.WithAuth(auth), remote.WithContext(ctx)); !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
			t.Errorf("pull %s: %v, want 401 Unauthorized", name, err)
		}
	}
}
