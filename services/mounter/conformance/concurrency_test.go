package conformance

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Readers and writers at once, on one mount and across two mounts of one bucket, and a writer
// killed in the middle of its file.

// pinnedReader reads its file's first bytes, says so, waits for a line on stdin, then reads on
// to the end; it copies everything it read to a local file and prints how the reading ended.
const pinnedReader = `
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
first = int(sys.argv[3])
with open(sys.argv[2], 'wb') as out:
    got = 0
    while got < first:
        b = os.read(fd, first - got)
        if not b:
            break
        out.write(b)
        got += len(b)
    out.flush()
    print('read', got, flush=True)
    sys.stdin.readline()
    try:
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            out.write(b)
        print('eof', flush=True)
    except OSError as e:
        print('error', e.errno, e.strerror, flush=True)
`

func aReaderKeepsTheVersionItOpened(e *env) {
	const size = 8 << 20
	v1, v2 := randomBytes(size), randomBytes(size)
	e.put("f.bin", v1)
	other := e.mount()
	copied := filepath.Join(e.scratch, "read.bin")
	reader := e.start(e.m.dir, "python3", "-c", pinnedReader, "f.bin", copied, strconv.Itoa(1<<20))
	reader.await("read ")

	// Another client replaces the object; a new open on the reader's mount reads the new version
	// (and fills the kernel's page cache of the file with it).
	e.wantOK(e.shIn(other, "cat "+e.local("v2.bin", v2)+" > f.bin"))
	e.wantObject("f.bin", v2)
	e.wantRead(e.m, "f.bin", v2)

	reader.send("go on")
	r := reader.finish()
	e.wantOK(r)
	got, err := os.ReadFile(copied)
	if err != nil {
		e.t.Fatal(err)
	}
	// Old bytes or an error, never a byte of the new version.
	if !bytes.HasPrefix(v1, got) {
		i := firstDifference(got, v1)
		what := "bytes of neither version"
		if end := min(len(got), i+4096); i < len(v2) && bytes.Equal(got[i:end], v2[i:end]) {
			what = "the new version's bytes"
		}
		e.fatalf("the reader got %d bytes: the version it opened up to byte %d, then %s: %s", len(got), i, what, r)
	}
	if strings.Contains(r.stdout, "eof") && len(got) != size {
		e.fatalf("the reader ended without an error after %d of %d bytes, a silently short read: %s", len(got), size, r)
	}
}

func overwriteOfAFileBeingReadIsRefused(e *env) {
	old := []byte(strings.Repeat("old line\n", 1000))
	e.put("r.txt", old)
	copied := filepath.Join(e.scratch, "read.txt")
	reader := e.start(e.m.dir, "python3", "-c", pinnedReader, "r.txt", copied, "9")
	reader.await("read ")
	e.wantFailure(e.sh(`echo new > r.txt`), "Operation not permitted")
	reader.send("go on")
	r := reader.finish()
	e.wantOK(r)
	if got, err := os.ReadFile(copied); err != nil || !bytes.Equal(got, old) {
		e.fatalf("the reader read %s (%v); want %s: %s", describe(got), err, describe(old), r)
	}
	e.wantObject("r.txt", old)
}

// holdingWriter writes its second argument to the file of its first, says so, waits for a line
// on stdin, writes its third argument and closes the file. It never duplicates the descriptor:
// between its writes the file is being written, with no close that could end it.
const holdingWriter = `
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, sys.argv[2].encode())
print('written', flush=True)
sys.stdin.readline()
os.write(fd, sys.argv[3].encode())
os.close(fd)
print('closed', flush=True)
`

// whileWritten runs check while a writer holds w.txt open on the case's mount with "x\n"
// written, then lets the writer finish with "y\n" and checks the object.
func (e *env) whileWritten(check func()) {
	e.t.Helper()
	writer := e.start(e.m.dir, "python3", "-c", holdingWriter, "w.txt", "x\n", "y\n")
	writer.await("written")
	check()
	writer.send("go on")
	e.wantOK(writer.finish())
	e.wantObject("w.txt", []byte("x\ny\n"))
}

func readOfAFileBeingWrittenIsRefused(e *env) {
	e.whileWritten(func() {
		e.wantFailure(e.sh(`cat w.txt`), "Operation not permitted")
	})
	e.wantRead(e.m, "w.txt", []byte("x\ny\n"))
}

func aSecondWriterIsRefused(e *env) {
	e.whileWritten(func() {
		e.wantFailure(e.sh(`echo b > w.txt`), "Operation not permitted")
	})
}

func rmOfAFileBeingWrittenIsRefused(e *env) {
	e.whileWritten(func() {
		e.wantFailure(e.sh(`rm w.txt`), "Operation not permitted")
	})
}

func aFileBeingWrittenIsInvisibleToAnotherMount(e *env) {
	other := e.mount()
	e.whileWritten(func() {
		e.wantFailure(e.run(other.dir, "cat", "w.txt"), "No such file or directory")
		e.wantNoObject("w.txt")
	})
	e.wantRead(other, "w.txt", []byte("x\ny\n"))
}

func anObjectAnotherClientWroteIsReadableAtOnce(e *env) {
	e.wantOK(e.sh(`ls && ! cat new.txt 2>/dev/null`))
	e.put("new.txt", []byte("fresh\n"))
	r := e.sh(`ls`)
	e.wantOK(r)
	if r.stdout != "new.txt\n" {
		e.fatalf("want the listing to show new.txt: %s", r)
	}
	e.wantRead(e.m, "new.txt", []byte("fresh\n"))
}

// killedWriter copies its first argument to its second, stops after the number of bytes of its
// third, says so, and waits on stdin until it is killed.
const killedWriter = `
import os, sys
src = os.open(sys.argv[1], os.O_RDONLY)
dst = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
stop = int(sys.argv[3])
done = 0
while done < stop:
    b = os.read(src, min(1 << 20, stop - done))
    while b:
        n = os.write(dst, b)
        b = b[n:]
        done += n
print('written', done, flush=True)
sys.stdin.readline()
`

func aWriterKilledMidFileLeavesWhatItWrote(e *env) {
	const size, killedAt = 100 << 20, 50 << 20
	old := randomBytes(1 << 20)
	e.put("big.bin", old)
	src := randomBytes(size)
	writer := e.start(e.m.dir, "python3", "-c", killedWriter, e.local("big.src", src), "big.bin", strconv.Itoa(killedAt))
	writer.await("written")
	writer.kill()
	// The kernel closes a killed process's files as it closes an exiting one's: the file ends
	// there, and the mounter cannot tell the kill from an exit.
	got, ok := e.object("big.bin")
	switch {
	case !ok:
		e.fatalf("the bucket has no object big.bin after its writer was killed")
	case bytes.Equal(got, old):
		e.fatalf("big.bin is still the previous version; the docs say the bytes written before the kill are stored")
	case !bytes.Equal(got, src[:killedAt]):
		e.fatalf("big.bin holds %s; want the %d bytes written before the kill (%s)", describe(got), killedAt, difference(got, src[:killedAt]))
	}
}
