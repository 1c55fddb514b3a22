// Package push copies image indexes, with the artifacts that refer to their images, to a
// registry: credentials from the Docker config, HTTPS unless the registry is this machine.
package push

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Options say where and how to push.
type Options struct {
	// Registry is the destination prefix, host[:port]/path: image NAME is pushed as
	// Registry/NAME:TAG.
	Registry string
	// Keychain finds the registry's credentials; nil means authn.DefaultKeychain (the Docker
	// config, $DOCKER_CONFIG/config.json, and its credential helpers).
	Keychain authn.Keychain
	// Transport is the HTTP transport under the registry client; nil means
	// remote.DefaultTransport. It is always wrapped in the HTTPS-only rule (see HTTPSOnly).
	Transport http.RoundTripper
	// Remote holds further options of go-containerregistry's client (tests shorten its retries).
	Remote []remote.Option
}

// Result is one pushed index.
type Result struct {
	// Ref is the tag pushed.
	Ref name.Tag
	// Digest is the index's digest.
	Digest v1.Hash
	// Manifests counts the platform images; Referrers the artifacts (SBOMs) pushed with them.
	Manifests, Referrers int
}

// Repository returns the repository image is pushed to: the registry prefix of o and the image's
// name. Plain HTTP is allowed for a loopback host only.
func (o Options) Repository(image string) (name.Repository, error) {
	prefix := strings.TrimSuffix(o.Registry, "/")
	if prefix == "" {
		return name.Repository{}, fmt.Errorf("no registry: want host[:port]/prefix, e.g. ghcr.io/s3csi or 127.0.0.1:5000/s3csi")
	}
	if strings.Contains(prefix, "://") {
		return name.Repository{}, fmt.Errorf("registry %q: want host[:port]/prefix without a scheme", o.Registry)
	}
	host, _, _ := strings.Cut(prefix, "/")
	var opts []name.Option
	opts = append(opts, name.StrictValidation)
	if Loopback(host) {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(prefix+"/"+image, opts...)
	if err != nil {
		return name.Repository{}, fmt.Errorf("registry %q: want host[:port]/prefix, the host with a dot, a port or localhost: %w", o.Registry, err)
	}
	if repo.RegistryStr() != host {
		return name.Repository{}, fmt.Errorf("registry %q: want host[:port]/prefix, the first part naming the registry host", o.Registry)
	}
	return repo, nil
}

// Loopback reports whether host (a registry's host[:port], or a bare host) is this machine's
// loopback: localhost, 127.0.0.0/8 or ::1. Only such a registry may be spoken to in plain HTTP.
func Loopback(host string) bool {
	h := host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		h = hp
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Index pushes index with its platform images to Repository(image):tag, then each of referrers
// (artifacts such as SBOMs whose subjects are those images) by digest, after the images they
// refer to. An error names the reference, the registry and what it answered.
func Index(ctx context.Context, o Options, image string, index v1.ImageIndex, tag string, referrers []v1.Image) (Result, error) {
	repo, err := o.Repository(image)
	if err != nil {
		return Result{}, err
	}
	ref := repo.Tag(tag)
	keychain := o.Keychain
	if keychain == nil {
		keychain = authn.DefaultKeychain
	}
	base := o.Transport
	if base == nil {
		base = remote.DefaultTransport
	}
	opts := append([]remote.Option{
		remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain), remote.WithTransport(HTTPSOnly(base)),
		remote.WithUserAgent("s3csi-imagebuild"),
	}, o.Remote...)

	r := Result{Ref: ref}
	if r.Digest, err = index.Digest(); err != nil {
		return Result{}, fmt.Errorf("push %s: %w", ref, err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		return Result{}, fmt.Errorf("push %s: %w", ref, err)
	}
	r.Manifests = len(im.Manifests)
	if err := remote.WriteIndex(ref, index, opts...); err != nil {
		return Result{}, fmt.Errorf("push %s to registry %s: %w", ref, repo.RegistryStr(), withStatus(err))
	}
	for _, a := range referrers {
		d, err := a.Digest()
		if err != nil {
			return Result{}, fmt.Errorf("push referrer of %s: %w", ref, err)
		}
		if err := remote.Write(repo.Digest(d.String()), a, opts...); err != nil {
			return Result{}, fmt.Errorf("push referrer %s of %s to registry %s: %w", d, ref, repo.RegistryStr(), withStatus(err))
		}
		r.Referrers++
	}
	return r, nil
}

// withStatus adds the HTTP status of a registry's answer to err when its message leaves it out
// (go-containerregistry gives only the registry's error codes when the answer has a body).
func withStatus(err error) error {
	var te *transport.Error
	if errors.As(err, &te) && te.StatusCode != 0 && !strings.Contains(err.Error(), strconv.Itoa(te.StatusCode)) {
		return fmt.Errorf("%w (HTTP %d %s)", err, te.StatusCode, http.StatusText(te.StatusCode))
	}
	return err
}

// HTTPSOnly wraps next so that no request leaves in plain HTTP for a host that is not loopback.
//
// Problem: go-containerregistry speaks plain HTTP not only to a registry marked name.Insecure
// but, on its own, to every RFC 1918 address (10/8, 172.16/12, 192.168/16) and *.local name,
// where a man in the middle could read credentials and swap images.
// Solution: such a request is sent as HTTPS instead (so a private registry with TLS works, one
// without fails); only a loopback host is ever spoken to in plain HTTP.
// Invariant: every request this transport sends to a non-loopback host is HTTPS.
func HTTPSOnly(next http.RoundTripper) http.RoundTripper { return httpsOnly{next: next} }

type httpsOnly struct{ next http.RoundTripper }

func (t httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || Loopback(req.URL.Host) {
		return t.next.RoundTrip(req)
	}
	upgraded := req.Clone(req.Context())
	upgraded.URL.Scheme = "https"
	return t.next.RoundTrip(upgraded)
}
