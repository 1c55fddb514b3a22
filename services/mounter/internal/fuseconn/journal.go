package fuseconn

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"

	"golang.org/x/sys/unix"

	"github.com/s3csi/s3csi/shared/handshake"
)

// The journal is a file (a memfd in production) that records what the kernel holds of a FUSE
// connection, so that a server started after this one died, even by SIGKILL, can resume the
// connection. Layout: a 4 KiB header page with the magic and the offset of the first live record,
// then records, each [payload length u32][CRC-32C of the payload u32][payload], the payload's
// first byte its kind.
//
// Problem: the log grows with every lookup, and a process killed mid-write leaves a torn record.
// Solution: a record is written before the reply it describes reaches the kernel, and a reader
// stops at the first short or corrupt record; when the log is much larger than the state, the
// state is written again after the log as a checkpoint (starting with a recCheckpoint record) and
// only then does the header's 8-byte start offset move to it, in one write; the old log is freed
// with a punched hole.
// Invariant: from the header's start, the records up to the first torn one or the first
// checkpoint record past the start describe the state as the kernel saw it.
const (
	journalMagic  = "s3csiJ1\x00"
	headerSize    = 4096
	minCompaction = 1 << 20

	recInit       = 'I' // the kernel's INIT request
	recInitReply  = 'i' // the INIT reply it received
	recNode       = 'N' // id, gen, parent, lookups added, stale, name
	recForget     = 'F' // id, lookups removed
	recOpen       = 'O' // fh, node, flags, dir, stale, then the version the handle reads, if known
	recRelease    = 'R' // fh
	recCheckpoint = 'C' // the state is written again from here
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrNoJournal is returned by Resume when the journal holds no connection state.
var ErrNoJournal = errors.New("the journal holds no FUSE connection state")

type journal struct {
	f          *os.File
	start, end int64
	err        error // the first write error: the journal no longer describes the connection
}

// newJournal starts an empty journal in f, which must be empty.
func newJournal(f *os.File) (*journal, error) {
	j := &journal{f: f, start: headerSize, end: headerSize}
	if err := f.Truncate(0); err != nil {
		return nil, fmt.Errorf("truncate journal: %w", err)
	}
	if err := j.writeHeader(); err != nil {
		return nil, err
	}
	return j, nil
}

func (j *journal) writeHeader() error {
	h := make([]byte, 16)
	copy(h, journalMagic)
	le.PutUint64(h[8:], uint64(j.start)) //nolint:gosec // offsets are positive
	if _, err := j.f.WriteAt(h, 0); err != nil {
		return fmt.Errorf("write journal header: %w", err)
	}
	return nil
}

// append writes records at the end of the log. After a failed write the journal is marked
// unusable (its header is cleared, best effort) so that no server resumes from a partial state.
func (j *journal) append(recs ...[]byte) error {
	if j.err != nil {
		return j.err
	}
	var b []byte
	for _, r := range recs {
		b = frame(b, r)
	}
	if _, err := j.f.WriteAt(b, j.end); err != nil {
		j.fail(err)
		return j.err
	}
	j.end += int64(len(b))
	return nil
}

func frame(b, payload []byte) []byte {
	b = le.AppendUint32(b, uint32(len(payload))) //nolint:gosec // records are small
	b = le.AppendUint32(b, crc32.Checksum(payload, castagnoli))
	return append(b, payload...)
}

func (j *journal) fail(err error) {
	j.err = fmt.Errorf("write FUSE state journal: %w", err)
	_, _ = j.f.WriteAt(make([]byte, 16), 0)
}

// checkpoint writes the state recs after the log, then points the header at them.
func (j *journal) checkpoint(recs [][]byte) error {
	if j.err != nil {
		return j.err
	}
	old := j.start
	at := j.end
	if err := j.append(append([][]byte{{recCheckpoint}}, recs...)...); err != nil {
		return err
	}
	j.start = at
	if err := j.writeHeader(); err != nil {
		j.fail(err)
		return j.err
	}
	// Free the old log; a failure only costs memory.
	if from, to := old&^(headerSize-1), at&^(headerSize-1); to > from && from >= headerSize {
		_ = unix.Fallocate(int(j.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, from, to-from)
	}
	return nil
}

// size is the bytes of the live log.
func (j *journal) size() int64 { return j.end - j.start }

// readJournal returns the records of f's live log and a journal positioned to append after them.
func readJournal(f *os.File) ([][]byte, *journal, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("stat journal: %w", err)
	}
	if st.Size() < headerSize {
		return nil, nil, ErrNoJournal
	}
	if st.Size() > handshake.MaxStateSize {
		return nil, nil, fmt.Errorf("journal of %d bytes, more than the %d a connection's state takes", st.Size(), handshake.MaxStateSize)
	}
	h := make([]byte, 16)
	if _, err := f.ReadAt(h, 0); err != nil {
		return nil, nil, fmt.Errorf("read journal header: %w", err)
	}
	if !bytes.Equal(h[:8], []byte(journalMagic)) {
		return nil, nil, ErrNoJournal
	}
	start := int64(le.Uint64(h[8:])) //nolint:gosec // checked below
	if start < headerSize || start > st.Size() {
		return nil, nil, fmt.Errorf("journal start %d outside its %d bytes", start, st.Size())
	}
	log := make([]byte, st.Size()-start)
	if _, err := f.ReadAt(log, start); err != nil {
		return nil, nil, fmt.Errorf("read journal: %w", err)
	}
	var recs [][]byte
	off := 0
	for len(log)-off >= 8 {
		n := int(le.Uint32(log[off:]))
		if n == 0 || len(log)-off-8 < n {
			break
		}
		p := log[off+8 : off+8+n]
		if crc32.Checksum(p, castagnoli) != le.Uint32(log[off+4:]) {
			break
		}
		if p[0] == recCheckpoint && off > 0 {
			break // a checkpoint the header never pointed at: its writer died
		}
		recs = append(recs, p)
		off += 8 + n
	}
	return recs, &journal{f: f, start: start, end: start + int64(off)}, nil
}
