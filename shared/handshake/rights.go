package handshake

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// maxRights is the most descriptors one frame may carry: /dev/fuse and the state file.
const maxRights = 2

// Receive reads one frame from conn into v, with the descriptors attached to it (at most two).
// On error it closes the descriptors it received.
func Receive(conn *net.UnixConn, v proto.Message) ([]int, error) {
	buf := make([]byte, 4+MaxFrameSize)
	oob := make([]byte, unix.CmsgSpace(4*4))
	var fds []int
	fail := func(err error) ([]int, error) {
		closeAll(fds)
		return nil, err
	}
	got := 0
	want := -1
	for want < 0 || got < want {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf[got:], oob)
		if oobn > 0 {
			fds = append(fds, parseRights(oob[:oobn])...)
		}
		if err != nil {
			return fail(fmt.Errorf("read frame: %w", err))
		}
		if n == 0 {
			return fail(errors.New("read frame: connection closed early"))
		}
		got += n
		if want < 0 && got >= 4 {
			size := binary.BigEndian.Uint32(buf[:4])
			if size > MaxFrameSize {
				return fail(fmt.Errorf("read frame: %d bytes exceed %d", size, MaxFrameSize))
			}
			want = 4 + int(size)
		}
	}
	if len(fds) > maxRights {
		return fail(fmt.Errorf("read frame: %d file descriptors attached, at most %d", len(fds), maxRights))
	}
	if err := DecodeBody(bytes.NewReader(buf[4:want]), uint32(want-4), v); err != nil { //nolint:gosec // bounded
		return fail(err)
	}
	return fds, nil
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if rights, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, rights...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
