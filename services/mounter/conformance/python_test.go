package conformance

import (
	"fmt"
	"strings"
)

// Python's file API: buffered open/write/close, os.replace, os.fsync.

func pythonWritesAFile(e *env) {
	r := e.run(e.m.dir, "python3", "-c", `
with open('p.txt', 'w') as f:
    for i in range(20000):
        f.write('line %d\n' % i)
`)
	e.wantOK(r)
	var want strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	e.wantObject("p.txt", []byte(want.String()))
}

func pythonReplaceIsRefused(e *env) {
	e.put("src.txt", []byte("data\n"))
	r := e.run(e.m.dir, "python3", "-c", `
import errno, os
try:
    os.replace('src.txt', 'dst.txt')
    print('replaced')
except OSError as e:
    print(errno.errorcode[e.errno])
`)
	e.wantOK(r)
	if r.stdout != "ENOSYS\n" {
		e.fatalf("want os.replace refused with ENOSYS: %s", r)
	}
	e.wantKeys("", "src.txt")
	e.wantObject("src.txt", []byte("data\n"))
}

func pythonWriteAfterFsyncIsRefused(e *env) {
	r := e.run(e.m.dir, "python3", "-c", `
import errno, os
fd = os.open('f.txt', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b'synced\n')
os.fsync(fd)
try:
    os.write(fd, b'more\n')
    print('write ok')
except OSError as e:
    print('write', errno.errorcode[e.errno])
os.close(fd)
print('closed')
`)
	e.wantOK(r)
	if r.stdout != "write EBADF\nclosed\n" {
		e.fatalf("want the write after fsync refused with EBADF and close to succeed: %s", r)
	}
	e.wantObject("f.txt", []byte("synced\n"))
}
