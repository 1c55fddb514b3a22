package conformance

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Programs that write trees: tar, rsync, awk with many outputs.

// treeFiles is a small tree: a text file, a file over one 8 MiB write part (a multipart upload),
// an empty file.
func treeFiles() map[string][]byte {
	return map[string][]byte{
		"tree/a.txt":         []byte("alpha\n"),
		"tree/sub/big.bin":   randomBytes(9 << 20),
		"tree/sub/empty.txt": {},
	}
}

// wantTree fails the case unless the bucket holds exactly files, their names prefixed with
// prefix, under prefix.
func (e *env) wantTree(prefix string, files map[string][]byte) {
	e.t.Helper()
	var keys []string
	for name := range files {
		keys = append(keys, prefix+name)
	}
	e.eventuallyKeys(prefix, keys...)
	for name, data := range files {
		e.wantObject(prefix+name, data)
	}
}

// localTree writes files under the scratch directory, directories 0755 and files 0644 (the
// mount's modes, so that rsync -a has no mode to change), and returns the tree's path.
func (e *env) localTree(files map[string][]byte) string {
	e.t.Helper()
	for name, data := range files {
		e.local(name, data)
	}
	return filepath.Join(e.scratch, "tree")
}

// archive writes files as a tar archive in the scratch directory, directories first.
func (e *env) archive(files map[string][]byte) string {
	e.t.Helper()
	path := filepath.Join(e.scratch, "tree.tar")
	f, err := os.Create(path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	w := tar.NewWriter(f)
	mtime := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, dir := range []string{"tree/", "tree/sub/"} {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime}); err != nil {
			e.t.Fatal(err)
		}
	}
	for name, data := range files {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}); err != nil {
			e.t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		e.t.Fatal(err)
	}
	if err := f.Chmod(0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// wantOnlyErrors fails the case unless every line of the program's stderr is one of the
// expected errors (at least one) or its closing summary.
func (e *env) wantOnlyErrors(r result, expected, summary string) {
	e.t.Helper()
	seen := false
	for line := range strings.Lines(r.stderr) {
		switch {
		case strings.Contains(line, expected):
			seen = true
		case strings.Contains(line, summary):
		default:
			e.fatalf("unexpected error %q (want only %q): %s", strings.TrimSpace(line), expected, r)
		}
	}
	if !seen {
		e.fatalf("want errors %q: %s", expected, r)
	}
}

func tarExtractsButCannotSetDirectoryTimes(e *env) {
	files := treeFiles()
	r := e.run(e.m.dir, "tar", "-xf", e.archive(files))
	if r.code != 2 {
		e.fatalf("want exit 2 (times of the directories refused): %s", r)
	}
	e.wantOnlyErrors(r, "Cannot utime: Operation not permitted", "Exiting with failure status due to previous errors")
	e.wantTree("", files)
}

func tarExtractsWithoutTimes(e *env) {
	files := treeFiles()
	e.wantOK(e.run(e.m.dir, "tar", "-xmf", e.archive(files)))
	e.wantTree("", files)
}

func rsyncCannotRenameItsTemporaryFiles(e *env) {
	src := e.localTree(treeFiles())
	r := e.run(e.m.dir, "rsync", "-r", src+"/", "dst/")
	if r.code != 23 {
		e.fatalf("want exit 23 (partial transfer: rename refused): %s", r)
	}
	e.wantOnlyErrors(r, "Function not implemented (38)", "some files/attrs were not transferred")
	// rsync removes each temporary file whose rename failed, right after closing it, and ignores
	// a failed unlink: nothing may be left behind, an empty file's temporary included (stored
	// at its release, which the kernel sends after the close returned).
	e.wantKeys("")
}

func rsyncInplace(e *env) {
	files := treeFiles()
	src := e.localTree(files)
	e.wantOK(e.run(e.m.dir, "rsync", "-r", "--inplace", src+"/", "dst/"))
	e.wantTree("dst/", relativeTo("tree/", files))
}

func rsyncArchiveInplace(e *env) {
	files := treeFiles()
	src := e.localTree(files)
	r := e.run(e.m.dir, "rsync", "-a", "--inplace", src+"/", "dst/")
	if r.code != 23 {
		e.fatalf("want exit 23 (times refused): %s", r)
	}
	e.wantOnlyErrors(r, "failed to set times on", "some files/attrs were not transferred")
	e.wantTree("dst/", relativeTo("tree/", files))
}

// relativeTo strips prefix from the names of files.
func relativeTo(prefix string, files map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(files))
	for name, data := range files {
		out[strings.TrimPrefix(name, prefix)] = data
	}
	return out
}

// awkKeys is the number of files awk holds open for writing at once: more than the 64 buffers
// of 8 MiB a 512 MiB budget holds.
const awkKeys = 100

func awkWritesAHundredFilesAtOnce(e *env) {
	var input strings.Builder
	want := map[string][]byte{}
	for round := 1; round <= 2; round++ {
		for k := 1; k <= awkKeys; k++ {
			fmt.Fprintf(&input, "k%d v%d.%d\n", k, k, round)
		}
	}
	for k := 1; k <= awkKeys; k++ {
		want[fmt.Sprintf("k%d.txt", k)] = fmt.Appendf(nil, "v%d.1\nv%d.2\n", k, k)
	}
	keys := e.local("keys.txt", []byte(input.String()))
	// As written: awk buffers each output and writes it at exit. With fflush every file holds
	// written data while all are open.
	e.wantOK(e.sh(`mkdir plain && cd plain && awk '{print $2 > ($1".txt")}' ` + keys))
	e.wantOK(e.sh(`mkdir flushed && cd flushed && awk '{print $2 > ($1".txt"); fflush($1".txt")}' ` + keys))
	e.wantTree("plain/", want)
	e.wantTree("flushed/", want)
}
