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
//
// Problem: the peer (a Mountpoint Pod's mounter, for root) chooses how many descriptors it
// attaches, and to how many segments of a frame: counting them once the frame is read let a
// 3,000-byte answer sent a byte at a time make root hold 12,000 descriptors.
// Solution: each read has room for maxRights descriptors only (the kernel closes any beyond
// them and says so, MSG_CTRUNC), installs them close-on-exec, and the frame fails at the first
// read that brings the count over maxRights.
// Invariant: at most 2*maxRights descriptors are ever open in this process because of one
// frame, and none once Receive failed.
func Receive(conn *net.UnixConn, v proto.Message) ([]int, error) {
	buf := make([]byte, 4+MaxFrameSize)
	oob := make([]byte, unix.CmsgSpace(maxRights*4))
	var fds []int
	fail := func(err error) ([]int, error) {
		closeAll(fds)
		return nil, err
	}
	got := 0
	want := -1
	for want < 0 || got < want {
		n, oobn, flags, err := recvmsg(conn, buf[got:], oob)
		if oobn > 0 {
			fds = append(fds, parseRights(oob[:oobn])...)
		}
		switch {
		case flags&unix.MSG_CTRUNC != 0 || len(fds) > maxRights:
			return fail(fmt.Errorf("read frame: more than %d file descriptors attached", maxRights))
		case err != nil:
			return fail(fmt.Errorf("read frame: %w", err))
		case n == 0:
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
	if err := DecodeBody(bytes.NewReader(buf[4:want]), uint32(want-4), v); err != nil { //nolint:gosec // bounded
		return fail(err)
	}
	return fds, nil
}

// recvmsg is one recvmsg(2) on conn that installs received descriptors close-on-exec; it waits
// as conn's reads do (deadlines included).
func recvmsg(conn *net.UnixConn, p, oob []byte) (n, oobn, flags int, err error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, 0, 0, err
	}
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), p, oob, unix.MSG_CMSG_CLOEXEC)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if err == nil {
		err = rerr
	}
	return n, oobn, flags, err
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
