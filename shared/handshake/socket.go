package handshake

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// maxSocketPath is the longest path a sockaddr_un holds (108 bytes with its terminating NUL).
const maxSocketPath = 107

// Listen listens on sockPath, however long. The caller removes the socket file when done.
func Listen(sockPath string) (*net.UnixListener, error) {
	var ln *net.UnixListener
	err := withShortPath(sockPath, func(p string) error {
		var err error
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", sockPath, err)
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// withShortPath calls fn with sockPath, or, when it is too long for a socket address, with the
// same file reached through /proc/self/fd/<parent dir fd>.
func withShortPath(sockPath string, fn func(string) error) error {
	if len(sockPath) <= maxSocketPath {
		return fn(sockPath)
	}
	dir, err := os.Open(filepath.Dir(sockPath))
	if err != nil {
		return err
	}
	defer func() { _ = dir.Close() }()
	return fn("/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + filepath.Base(sockPath))
}
