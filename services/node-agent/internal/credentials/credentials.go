// Package credentials writes the S3 credentials of a Mountpoint Pod as AWS profile files into
// its comm dir, where its filesystem reads them. Credentials never travel as process
// environment or in the mount request, so they can be rotated without a remount: every
// NodePublishVolume (kubelet republishes periodically) writes them again.
package credentials

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/s3csi/s3csi/shared/commdir"
	"github.com/s3csi/s3csi/shared/mppod"
)

// Profile is the profile name in the files.
const Profile = "s3csi"

// File names inside <comm>/credentials.
const (
	ConfigFileName      = "s3csi-config"
	CredentialsFileName = "s3csi-credentials"
)

// Keys of a nodePublishSecretRef Secret.
const (
	SecretAccessKeyID     = "access_key_id"
	SecretSecretAccessKey = "secret_access_key"
	SecretSessionToken    = "session_token"
)

var (
	accessKeyRE = regexp.MustCompile(`^[A-Za-z0-9]{1,128}$`)
	secretKeyRE = regexp.MustCompile(`^[A-Za-z0-9/+=-]{1,128}$`)
	tokenRE     = regexp.MustCompile(`^[A-Za-z0-9/+=_.-]+$`)
)

// Static are long-term or session keys. Its String method never shows the secret parts.
type Static struct {
	AccessKeyID, SecretAccessKey, SessionToken string
}

// String shows only whether keys are set.
func (s Static) String() string {
	return fmt.Sprintf("Static{accessKeyID set: %t}", s.AccessKeyID != "")
}

// Empty reports whether no keys are set (the filesystem then uses its default chain).
func (s Static) Empty() bool { return s.AccessKeyID == "" && s.SecretAccessKey == "" }

// Validate checks the keys' shapes; the error never contains a key.
func (s Static) Validate() error {
	if s.Empty() {
		return nil
	}
	var errs []error
	if !accessKeyRE.MatchString(s.AccessKeyID) {
		errs = append(errs, errors.New("the access key id is empty or has characters other than letters and digits"))
	}
	if !secretKeyRE.MatchString(s.SecretAccessKey) {
		errs = append(errs, errors.New("the secret access key is empty or has characters outside [A-Za-z0-9/+=-]"))
	}
	if s.SessionToken != "" && (len(s.SessionToken) > 4096 || !tokenRE.MatchString(s.SessionToken)) {
		errs = append(errs, errors.New("the session token has characters that are not allowed"))
	}
	return errors.Join(errs...)
}

// FromSecrets reads a nodePublishSecretRef's keys.
func FromSecrets(secrets map[string]string) (Static, error) {
	s := Static{
		AccessKeyID:     secrets[SecretAccessKeyID],
		SecretAccessKey: secrets[SecretSecretAccessKey],
		SessionToken:    secrets[SecretSessionToken],
	}
	if s.Empty() {
		return s, fmt.Errorf("the node publish secret has no %s and %s keys", SecretAccessKeyID, SecretSecretAccessKey)
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("check node publish secret: %w", err)
	}
	return s, nil
}

// Files are the profile files of one Mountpoint Pod, relative to its comm dir.
type Files struct {
	ConfigFile, CredentialsFile string
}

// Write writes the profile files into commDir/credentials (dir 0750, files 0640) and returns
// their names relative to commDir. Each file is written to a temporary name and renamed, so a
// reader sees the old or the new content, never a partial one. The Mountpoint Pod can write the
// comm dir: a symlink at credentials/ or at a file's name is refused or replaced, never followed.
func Write(commDir string, creds Static, region string) (Files, error) {
	return WriteProfiles(commDir, Render(creds, region))
}

// Profiles is the content of one Mountpoint Pod's profile files. It holds the secret key: it
// must never reach a log, an event or an API object.
type Profiles struct {
	Config, Credentials []byte
}

// String keeps the secret key out of logs.
func (Profiles) String() string { return "credentials.Profiles{redacted}" }

// Render returns the profile files for creds and region.
func Render(creds Static, region string) Profiles {
	var config strings.Builder
	fmt.Fprintf(&config, "[profile %s]\n", Profile)
	if region != "" {
		fmt.Fprintf(&config, "region = %s\n", region)
	}
	var keys strings.Builder
	fmt.Fprintf(&keys, "[%s]\n", Profile)
	if !creds.Empty() {
		fmt.Fprintf(&keys, "aws_access_key_id = %s\naws_secret_access_key = %s\n", creds.AccessKeyID, creds.SecretAccessKey)
		if creds.SessionToken != "" {
			fmt.Fprintf(&keys, "aws_session_token = %s\n", creds.SessionToken)
		}
	}
	return Profiles{Config: []byte(config.String()), Credentials: []byte(keys.String())}
}

// WriteProfiles writes p into commDir as Write does.
func WriteProfiles(commDir string, p Profiles) (Files, error) {
	dir, err := credentialsDir(commDir)
	if err != nil {
		return Files{}, err
	}
	defer func() { _ = dir.Close() }()
	if err := dir.WriteFile(ConfigFileName, p.Config, 0o640); err != nil {
		return Files{}, err
	}
	if err := dir.WriteFile(CredentialsFileName, p.Credentials, 0o640); err != nil {
		return Files{}, err
	}
	return Files{
		ConfigFile:      filepath.Join(mppod.CredentialsName, ConfigFileName),
		CredentialsFile: filepath.Join(mppod.CredentialsName, CredentialsFileName),
	}, nil
}

// credentialsDir opens commDir/credentials, creating it when missing.
func credentialsDir(commDir string) (*commdir.Dir, error) {
	comm, err := commdir.Open(commDir)
	if err != nil {
		return nil, fmt.Errorf("write credentials: %w", err)
	}
	defer func() { _ = comm.Close() }()
	dir, err := comm.Subdir(mppod.CredentialsName, 0o750)
	if err != nil {
		return nil, fmt.Errorf("create credentials dir: %w", err)
	}
	return dir, nil
}

func writeAtomic(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(0o640); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.WriteString(content); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// LegacyTokenName is the file in the plugin dir where the v1 (systemd) mounter copied the
// driver's web identity token, and where its mount-s3 processes still read it.
const LegacyTokenName = "token"

// RefreshLegacyToken copies the web identity token at src to pluginDir/token (0640, atomic), so
// that mount-s3 processes started by the v1 mounter keep authenticating after the token rotates.
func RefreshLegacyToken(pluginDir, src string) error {
	token, err := os.ReadFile(src) //nolint:gosec // the operator's token file
	if err != nil {
		return fmt.Errorf("read web identity token: %w", err)
	}
	return writeAtomic(filepath.Join(pluginDir, LegacyTokenName), string(token))
}
