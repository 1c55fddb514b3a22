package conformance

import (
	"path/filepath"
	"syscall"
)

// dd with each output flag, and cp: the open flags and write patterns of the usual copy tools.

// ddSize spans several 1 MiB writes, so a file cut after its first write shows.
const ddSize = 3 << 20

// ddStores is a case in which dd with args stores its input whole.
func ddStores(args ...string) func(*env) {
	return func(e *env) {
		src := randomBytes(ddSize)
		argv := append([]string{"dd", "if=" + e.local("src.bin", src), "of=dd.bin", "bs=1M"}, args...)
		e.wantOK(e.run(e.m.dir, argv...))
		e.wantObject("dd.bin", src)
	}
}

// ddIsRefusedAtOpen is a case in which dd with args gets EINVAL at open and stores nothing.
func ddIsRefusedAtOpen(args ...string) func(*env) {
	return func(e *env) {
		argv := append([]string{"dd", "if=" + e.local("src.bin", randomBytes(ddSize)), "of=dd.bin", "bs=1M"}, args...)
		e.wantFailure(e.run(e.m.dir, argv...), "failed to open 'dd.bin': Invalid argument")
		e.wantNoObject("dd.bin")
	}
}

// ddLeavesTheObject is a case in which dd with args, writing over an existing object without
// truncating it, is refused with EPERM and the object stays as it was.
func ddLeavesTheObject(args ...string) func(*env) {
	return func(e *env) {
		old := randomBytes(1 << 20)
		e.put("dd.bin", old)
		argv := append([]string{"dd", "if=" + e.local("src.bin", randomBytes(ddSize)), "of=dd.bin", "bs=1M"}, args...)
		e.wantFailure(e.run(e.m.dir, argv...), "Operation not permitted")
		e.wantObject("dd.bin", old)
	}
}

func ddSeekIntoANewFileIsRefused(e *env) {
	src := e.local("src.bin", randomBytes(ddSize))
	// conv=notrunc: dd would otherwise first truncate the new file to the offset it seeks to.
	e.wantFailure(e.run(e.m.dir, "dd", "if="+src, "of=dd.bin", "bs=1M", "seek=1", "conv=notrunc"), "error writing 'dd.bin': Invalid argument")
	e.wantNoObject("dd.bin")
}

func truncateToZeroEmptiesAnObject(e *env) {
	e.put("f.txt", []byte("old\n"))
	e.wantOK(e.sh(`truncate -s 0 f.txt`))
	e.eventuallyObject("f.txt", []byte{})
}

func truncateOfANewFileIsRefused(e *env) {
	e.wantFailure(e.sh(`truncate -s 1M new.bin`), "Operation not permitted")
	e.wantNoObject("new.bin")
}

// sparseFile makes a 20 MiB + 4 byte file with data only at both ends, as a user would (printf,
// truncate, printf), and checks that the scratch filesystem keeps the hole: cp seeks only over
// holes it finds.
func sparseFile(e *env) (path string, content []byte) {
	e.t.Helper()
	const size = 20 << 20
	e.wantOK(e.run(e.scratch, "sh", "-c", `printf head > sparse.bin && truncate -s 20M sparse.bin && printf tail >> sparse.bin`))
	content = make([]byte, size+4)
	copy(content, "head")
	copy(content[size:], "tail")
	path = filepath.Join(e.scratch, "sparse.bin")
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		e.t.Fatal(err)
	}
	if st.Blocks*512 >= size {
		e.t.Fatalf("%s: the scratch filesystem keeps no holes (%d blocks for %d bytes): set TMPDIR to an ext4, xfs or tmpfs directory", path, st.Blocks, size)
	}
	return path, content
}

func cpOfASparseFileLeavesTheObject(e *env) {
	good := randomBytes(5 << 20)
	e.put("big.bin", good)
	src, _ := sparseFile(e)
	e.wantFailure(e.run(e.m.dir, "cp", src, "big.bin"), "error writing 'big.bin': Invalid argument")
	e.wantObject("big.bin", good)
	e.wantRead(e.m, "big.bin", good)
}

func cpOfASparseFileWithoutHoles(e *env) {
	src, content := sparseFile(e)
	e.wantOK(e.run(e.m.dir, "cp", "--sparse=never", src, "full.bin"))
	e.wantObject("full.bin", content)
}
