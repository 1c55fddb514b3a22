package fuseconn

import (
	"encoding/binary"
	"syscall"
)

// The parts of the kernel's FUSE protocol (include/uapi/linux/fuse.h) this package reads itself:
// the request and reply headers, the opcodes whose requests or replies change what the kernel
// holds (node ids and their lookup counts, open file handles), and where a request names a file
// handle. Everything else is parsed by go-fuse's ProtocolServer.
const (
	inHeaderSize  = 40 // len u32, opcode u32, unique u64, nodeid u64, uid, gid, pid u32, extlen u16, pad u16
	outHeaderSize = 16 // len u32, error i32, unique u64
	entryOutSize  = 128
	openOutSize   = 16

	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opSetattr     = 4
	opSymlink     = 6
	opMknod       = 8
	opMkdir       = 9
	opLink        = 13
	opOpen        = 14
	opRead        = 15
	opWrite       = 16
	opRelease     = 18
	opFsync       = 20
	opFlush       = 25
	opInit        = 26
	opOpendir     = 27
	opReaddir     = 28
	opReleasedir  = 29
	opFsyncdir    = 30
	opGetlk       = 31
	opSetlk       = 32
	opSetlkw      = 33
	opCreate      = 35
	opInterrupt   = 36
	opDestroy     = 38
	opIoctl       = 39
	opPoll        = 40
	opBatchForget = 42
	opFallocate   = 43
	opReaddirplus = 44
	opLseek       = 46
	opCopyRange   = 47
	opTmpfile     = 51

	getattrFh = 1 << 0 // FUSE_GETATTR_FH
	fattrFh   = 1 << 3 // FATTR_FH

	notifyResend = 7 // FUSE_NOTIFY_RESEND, Linux 6.9
)

var le = binary.LittleEndian

// header is the part of a request's header this package uses.
type header struct {
	opcode uint32
	unique uint64
	nodeID uint64
}

func parseHeader(req []byte) (header, bool) {
	if len(req) < inHeaderSize || int(le.Uint32(req)) != len(req) {
		return header{}, false
	}
	return header{opcode: le.Uint32(req[4:]), unique: le.Uint64(req[8:]), nodeID: le.Uint64(req[16:])}, true
}

// fileHandle returns the file handle a request names, if its opcode carries one.
func fileHandle(op uint32, req []byte) (uint64, bool) {
	body := req[inHeaderSize:]
	u64 := func(off int) (uint64, bool) {
		if len(body) < off+8 {
			return 0, false
		}
		return le.Uint64(body[off:]), true
	}
	switch op {
	case opRead, opWrite, opRelease, opFsync, opFlush, opReaddir, opReleasedir, opFsyncdir,
		opGetlk, opSetlk, opSetlkw, opIoctl, opPoll, opFallocate, opReaddirplus, opLseek, opCopyRange:
		return u64(0)
	case opGetattr:
		if len(body) >= 4 && le.Uint32(body)&getattrFh != 0 {
			return u64(8)
		}
	case opSetattr:
		if len(body) >= 4 && le.Uint32(body)&fattrFh != 0 {
			return u64(8)
		}
	}
	return 0, false
}

// entryName returns the name a request creating or looking up an entry names, and whether the
// opcode's reply is an entry (a node id the kernel now holds one more lookup of).
func entryName(op uint32, req []byte) (string, bool) {
	body := req[inHeaderSize:]
	var skip int
	switch op {
	case opLookup:
	case opMkdir:
		skip = 8 // mode, umask
	case opMknod, opCreate:
		skip = 16 // mode/flags, rdev/mode, umask, padding/open_flags
	case opSymlink, opLink, opTmpfile:
		return "", true // s3fs refuses these; a success would be a node it cannot restore
	default:
		return "", false
	}
	if len(body) < skip {
		return "", true
	}
	name := body[skip:]
	for i, c := range name {
		if c == 0 {
			return string(name[:i]), true
		}
	}
	return string(name), true
}

// replyError returns the errno of a reply.
func replyError(reply []byte) syscall.Errno {
	if len(reply) < outHeaderSize {
		return syscall.EIO
	}
	return syscall.Errno(-int32(le.Uint32(reply[4:]))) //nolint:gosec // the kernel ABI is a signed errno
}

// errorReply is the reply to unique that fails it with errno.
func errorReply(unique uint64, errno syscall.Errno) []byte {
	b := make([]byte, outHeaderSize)
	le.PutUint32(b, outHeaderSize)
	le.PutUint32(b[4:], uint32(-int32(errno))) //nolint:gosec // the kernel ABI is a signed errno
	le.PutUint64(b[8:], unique)
	return b
}

// request builds a request as the kernel would send it, for replaying state into a new server.
func request(op uint32, unique, nodeID uint64, uid, gid uint32, body ...[]byte) []byte {
	n := inHeaderSize
	for _, b := range body {
		n += len(b)
	}
	r := make([]byte, inHeaderSize, n)
	le.PutUint32(r, uint32(n)) //nolint:gosec // requests are small
	le.PutUint32(r[4:], op)
	le.PutUint64(r[8:], unique)
	le.PutUint64(r[16:], nodeID)
	le.PutUint32(r[24:], uid)
	le.PutUint32(r[28:], gid)
	for _, b := range body {
		r = append(r, b...)
	}
	return r
}
