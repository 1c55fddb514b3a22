package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/volumecontext"

	"github.com/s3csi/s3csi/services/csi-controller/internal/s3client"
)

// Keys of a provisioner secret, as the Scality CSI Driver for S3 v2 names them.
const (
	SecretAccessKeyID     = "access_key_id"
	SecretSecretAccessKey = "secret_access_key"
	SecretSessionToken    = "session_token"
	SecretRegion          = "region"
)

// maxCachedClients bounds the client cache: one entry per distinct provisioner secret.
const maxCachedClients = 512

// DriverCredentials returns the driver's own credentials. It is called again each time the
// cached client expires, so a rotated Secret or environment takes effect within the cache TTL.
type DriverCredentials func() (s3client.Credentials, error)

// EnvCredentials reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
func EnvCredentials() DriverCredentials {
	return func() (s3client.Credentials, error) {
		c := s3client.Credentials{
			AccessKeyID:     os.Getenv("AWS_ACCESS_KEY_ID"),
			SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
			SessionToken:    os.Getenv("AWS_SESSION_TOKEN"),
		}
		if !c.Valid() {
			return c, errors.New("the driver has no credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set")
		}
		return c, nil
	}
}

// DirCredentials reads the files access_key_id, secret_access_key and optional session_token
// of dir (a mounted Secret).
func DirCredentials(dir string) DriverCredentials {
	return func() (s3client.Credentials, error) {
		read := func(name string, required bool) (string, error) {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if errors.Is(err, os.ErrNotExist) && !required {
				return "", nil
			}
			if err != nil {
				return "", fmt.Errorf("read driver credentials: %w", err)
			}
			return strings.TrimSpace(string(b)), nil
		}
		var c s3client.Credentials
		var err error
		if c.AccessKeyID, err = read(SecretAccessKeyID, true); err != nil {
			return c, err
		}
		if c.SecretAccessKey, err = read(SecretSecretAccessKey, true); err != nil {
			return c, err
		}
		if c.SessionToken, err = read(SecretSessionToken, false); err != nil {
			return c, err
		}
		if !c.Valid() {
			return c, fmt.Errorf("read driver credentials: %s or %s in %s is empty", SecretAccessKeyID, SecretSecretAccessKey, dir)
		}
		return c, nil
	}
}

// clients builds and caches S3 clients per set of credentials.
//
// Problem: building a client per RPC re-reads the driver's credentials and loses nothing else,
// but a client per secret kept forever would keep a rotated-away key alive.
// Solution: clients are cached under a hash of the credentials with a TTL; the driver's entry
// re-reads its credentials when it expires.
// Invariant: a client never outlives its TTL, and no secret is kept as a map key in clear.
type clients struct {
	endpoint s3client.Endpoint
	http     *http.Client
	driver   DriverCredentials
	ttl      time.Duration
	now      func() time.Time

	mu      sync.Mutex
	entries map[string]cachedClient
}

type cachedClient struct {
	api     S3API
	expires time.Time
}

func newClients(ep s3client.Endpoint, hc *http.Client, driver DriverCredentials, ttl time.Duration) *clients {
	return &clients{endpoint: ep, http: hc, driver: driver, ttl: ttl, now: time.Now, entries: map[string]cachedClient{}}
}

// forSecrets returns the client for a request's secrets and the volume's authentication
// source: the secret's credentials when the request has secrets, else the driver's. Malformed
// secrets are InvalidArgument; missing driver credentials FailedPrecondition.
func (c *clients) forSecrets(secrets map[string]string) (S3API, string, error) {
	if len(secrets) == 0 {
		api, err := c.get("driver", "", nil)
		return api, volumecontext.AuthenticationSourceDriver, err
	}
	creds := s3client.Credentials{
		AccessKeyID:     secrets[SecretAccessKeyID],
		SecretAccessKey: secrets[SecretSecretAccessKey],
		SessionToken:    secrets[SecretSessionToken],
	}
	if !creds.Valid() {
		return nil, "", status.Errorf(codes.InvalidArgument,
			"the provisioner secret must hold %q and %q (optional %q, %q)",
			SecretAccessKeyID, SecretSecretAccessKey, SecretSessionToken, SecretRegion)
	}
	region := secrets[SecretRegion]
	sum := sha256.Sum256([]byte(strings.Join([]string{creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken, region}, "\x00")))
	api, err := c.get(hex.EncodeToString(sum[:]), region, &creds)
	return api, volumecontext.AuthenticationSourceSecret, err
}

func (c *clients) get(key, region string, creds *s3client.Credentials) (S3API, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if e, ok := c.entries[key]; ok && now.Before(e.expires) {
		return e.api, nil
	}
	if creds == nil {
		d, err := c.driver()
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition,
				"no provisioner secret in the StorageClass and %v; set csi.storage.k8s.io/provisioner-secret-name and -namespace, or give the driver credentials", err)
		}
		creds = &d
	}
	client, err := s3client.New(c.endpoint, region, *creds, c.http)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	c.evictLocked(now)
	c.entries[key] = cachedClient{api: client, expires: now.Add(c.ttl)}
	return client, nil
}

// evictLocked drops expired entries and, if the cache is still full, the one expiring first.
func (c *clients) evictLocked(now time.Time) {
	if len(c.entries) < maxCachedClients {
		return
	}
	oldestKey, oldest := "", time.Time{}
	for k, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, k)
			continue
		}
		if oldestKey == "" || e.expires.Before(oldest) {
			oldestKey, oldest = k, e.expires
		}
	}
	if len(c.entries) >= maxCachedClients {
		delete(c.entries, oldestKey)
	}
}

var _ S3API = (*s3.Client)(nil)
