package events

import (
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Auth is how a service proves who it is to NATS, and how it checks the server's certificate.
// Secrets are never values: they are files (a mounted Secret), read when a connection is made.
type Auth struct {
	// User is the NATS user name (for the chart's NATS, the service name).
	User string
	// PasswordFile holds the user's password; one trailing newline is ignored.
	PasswordFile string
	// TLSCAFile holds the CA certificates (PEM) that sign the server's certificate. Set, the
	// connection requires TLS.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile hold the client certificate and key (PEM) for mutual TLS.
	TLSCertFile string
	TLSKeyFile  string
}

// Options returns the nats.go options of a, to pass to Connect. With a User, replies come to
// the user's own inbox (InboxPrefix), the only one its permissions let it read.
//
// Problem: a password read once at start-up goes stale when its Secret is rotated, and a
// service that keeps it in memory keeps reconnecting with the old one.
// Solution: the password file is read again on every (re)connect.
// Invariant: the password only ever reaches the server's CONNECT message: never a log or an
// error (a failed read sends an empty password, which the server refuses).
func (a Auth) Options() []nats.Option {
	var opts []nats.Option
	if a.User != "" {
		user, file := a.User, a.PasswordFile
		opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(Service(user))), nats.UserInfoHandler(func() (string, string) {
			if file == "" {
				return user, ""
			}
			pw, err := ReadPasswordFile(file)
			if err != nil {
				return user, ""
			}
			return user, pw
		}))
	}
	if a.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(a.TLSCAFile))
	}
	if a.TLSCertFile != "" || a.TLSKeyFile != "" {
		opts = append(opts, nats.ClientCert(a.TLSCertFile, a.TLSKeyFile))
	}
	return opts
}

// ReadPasswordFile returns the content of file without one trailing newline. Its errors name
// the file, never its content.
func ReadPasswordFile(file string) (string, error) {
	b, err := os.ReadFile(file) //nolint:gosec // the path is an operator's flag, not untrusted input
	if err != nil {
		return "", fmt.Errorf("read NATS password file: %w", err)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if pw == "" {
		return "", fmt.Errorf("read NATS password file %s: empty", file)
	}
	return pw, nil
}
