package servicecmd

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/s3csi/s3csi/shared/events"
)

// NATSAuthFromEnv is the default of CommonOptions.NATSAuth (and of kubectl s3csi's): NATS_USER,
// NATS_PASSWORD_FILE, NATS_TLS_CA_FILE, NATS_TLS_CERT_FILE, NATS_TLS_KEY_FILE. These are a user
// name and paths only, never a secret.
func NATSAuthFromEnv() events.Auth {
	return events.Auth{
		User:         os.Getenv("NATS_USER"),
		PasswordFile: os.Getenv("NATS_PASSWORD_FILE"),
		TLSCAFile:    os.Getenv("NATS_TLS_CA_FILE"),
		TLSCertFile:  os.Getenv("NATS_TLS_CERT_FILE"),
		TLSKeyFile:   os.Getenv("NATS_TLS_KEY_FILE"),
	}
}

// AddNATSAuthFlags registers --nats-user, --nats-password-file and --nats-tls-* for a on fs,
// with the current values as defaults.
func AddNATSAuthFlags(fs *pflag.FlagSet, a *events.Auth) {
	fs.StringVar(&a.User, "nats-user", a.User,
		"NATS user name; requires --nats-password-file (env NATS_USER)")
	fs.StringVar(&a.PasswordFile, "nats-password-file", a.PasswordFile,
		"file holding the NATS user's password, read at every (re)connect (env NATS_PASSWORD_FILE)")
	fs.StringVar(&a.TLSCAFile, "nats-tls-ca-file", a.TLSCAFile,
		"PEM CA bundle that signs the NATS server's certificate; set, TLS is required (env NATS_TLS_CA_FILE)")
	fs.StringVar(&a.TLSCertFile, "nats-tls-cert-file", a.TLSCertFile,
		"PEM client certificate for mutual TLS; requires --nats-tls-key-file (env NATS_TLS_CERT_FILE)")
	fs.StringVar(&a.TLSKeyFile, "nats-tls-key-file", a.TLSKeyFile,
		"PEM client key for mutual TLS; requires --nats-tls-cert-file (env NATS_TLS_KEY_FILE)")
}

// ValidateNATSAuth checks the pairs of flags that go together and that every named file can
// be read now, so a missing Secret mount fails at start-up, naming the flag, instead of as an
// endless "authorization violation" in the reconnect loop. Errors name files, never contents.
func ValidateNATSAuth(a events.Auth) []error {
	var errs []error
	if (a.User == "") != (a.PasswordFile == "") {
		errs = append(errs, errors.New("--nats-user and --nats-password-file: set both or neither"))
	}
	if (a.TLSCertFile == "") != (a.TLSKeyFile == "") {
		errs = append(errs, errors.New("--nats-tls-cert-file and --nats-tls-key-file: set both or neither"))
	}
	if a.PasswordFile != "" {
		if _, err := events.ReadPasswordFile(a.PasswordFile); err != nil {
			errs = append(errs, fmt.Errorf("--nats-password-file: %w", err))
		}
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-tls-ca-file", a.TLSCAFile},
		{"--nats-tls-cert-file", a.TLSCertFile},
		{"--nats-tls-key-file", a.TLSKeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.ReadFile(f.path); err != nil { //nolint:gosec // an operator's flag
			errs = append(errs, fmt.Errorf("%s: %w", f.flag, err))
		}
	}
	return errs
}

// validateNATSAuth is ValidateNATSAuth, and auth without a URL: a service without --nats-url
// has events disabled, so its NATS user would be silently unused.
func (o *CommonOptions) validateNATSAuth() []error {
	errs := ValidateNATSAuth(o.NATSAuth)
	if (o.NATSAuth.User != "" || o.NATSAuth.TLSCAFile != "") && o.NATSURL == "" {
		errs = append(errs, errors.New("--nats-user and --nats-tls-*: set without --nats-url, events are disabled"))
	}
	return errs
}
