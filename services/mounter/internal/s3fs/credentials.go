package s3fs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// credentialsRecheck is how long retrieved credentials are trusted before the shared files are
// checked again for a change.
const credentialsRecheck = 5 * time.Second

// ReloadingCredentials is the standard AWS credential chain (environment, shared config and
// credentials files, web identity, container and instance roles) rebuilt whenever the shared
// config or credentials file changes.
//
// Problem: the SDK reads profile files once, so rotated keys in a mounted Secret would need a
// remount.
// Solution: Retrieve compares the files' size and modification time with those seen at the last
// load and rebuilds the chain on a difference; credentials it returns expire after a few seconds
// so that the client's cache asks again.
// Invariant: a change to either file is used by requests starting credentialsRecheck after it.
type ReloadingCredentials struct {
	profile string

	mu    sync.Mutex
	stamp string
	inner aws.CredentialsProvider
}

// NewReloadingCredentials returns the chain for profile (empty: the default profile).
func NewReloadingCredentials(profile string) *ReloadingCredentials {
	return &ReloadingCredentials{profile: profile}
}

// Retrieve returns the current credentials, reloading the chain when a shared file changed.
func (r *ReloadingCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	r.mu.Lock()
	stamp := filesStamp()
	if r.inner == nil || stamp != r.stamp {
		var opts []func(*config.LoadOptions) error
		if r.profile != "" {
			opts = append(opts, config.WithSharedConfigProfile(r.profile))
		}
		cfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			r.mu.Unlock()
			return aws.Credentials{}, fmt.Errorf("load AWS credentials: %w", err)
		}
		r.inner, r.stamp = cfg.Credentials, stamp
	}
	inner := r.inner
	r.mu.Unlock()
	if inner == nil {
		return aws.Credentials{}, fmt.Errorf("load AWS credentials: no provider in the chain")
	}
	creds, err := inner.Retrieve(ctx)
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("retrieve AWS credentials: %w", err)
	}
	recheck := time.Now().Add(credentialsRecheck)
	if !creds.CanExpire || creds.Expires.After(recheck) {
		creds.CanExpire, creds.Expires = true, recheck
	}
	return creds, nil
}

// filesStamp identifies the content version of the shared config and credentials files.
func filesStamp() string {
	var b strings.Builder
	for _, f := range sharedFiles() {
		b.WriteString(f)
		if fi, err := os.Stat(f); err == nil {
			b.WriteString(":" + strconv.FormatInt(fi.Size(), 10) + ":" + strconv.FormatInt(fi.ModTime().UnixNano(), 10))
		}
		b.WriteByte(';')
	}
	return b.String()
}

func sharedFiles() []string {
	home, _ := os.UserHomeDir()
	creds := os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
	if creds == "" {
		creds = filepath.Join(home, ".aws", "credentials")
	}
	cfg := os.Getenv("AWS_CONFIG_FILE")
	if cfg == "" {
		cfg = filepath.Join(home, ".aws", "config")
	}
	return []string{creds, cfg}
}
