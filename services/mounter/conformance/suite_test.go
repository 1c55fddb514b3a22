package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/s3csi/s3csi/shared/testenv"
)

// behavior is one row of the suite and of the docs table.
type behavior struct {
	// name is the subtest's name: stable, since the docs table and -run patterns use it.
	name string
	// does is the behavior in words, as the docs table shows it (markdown).
	does string
	// verdict compares it with mount-s3: same, or stricter(why) or different(why).
	verdict string
	// options are the case's mount options besides the suite's own.
	options []string
	run     func(e *env)
}

const same = "same"

func stricter(why string) string  { return "stricter: " + why }
func different(why string) string { return "different: " + why }

// suite is every behavior, in the order of the docs table.
var suite = []behavior{
	{"sh redirect of a script with a child",
		"`sh -c 'echo a; /bin/echo b; echo c' > f` stores the three lines and exits 0: a child that inherited the descriptor and exits does not end the file, the shell's close does",
		same, nil, redirectOfAScriptWithAChild},
	{"redirect of a loop of cats",
		"`for f in a b; do cat \"$f\"; done > all` stores both files",
		same, nil, redirectOfALoopOfCats},
	{"redirect of a group with a child",
		"`{ echo a; /bin/true; echo b; } > g` stores both lines",
		same, nil, redirectOfAGroupWithAChild},
	{"redirect replaces an object",
		"`echo new > f` over an existing object (`O_TRUNC`, `--allow-overwrite`) stores the new content",
		same, nil, redirectReplacesAnObject},
	{"append redirect is refused",
		"`echo more >> f` to an existing object fails with `EPERM`; the object is unchanged",
		same, nil, appendRedirectIsRefused},
	{"touch and an empty redirect store empty objects",
		"`touch t` and `: > e` of new files store empty objects",
		same, nil, touchAndEmptyRedirectStoreEmptyObjects},
	{"touch of an existing object is refused",
		"`touch f` of an existing object fails with `EPERM` (a stored file's times cannot change); the object is unchanged",
		same, nil, touchOfAnExistingObjectIsRefused},
	{"mkdir is local until a file is written",
		"`mkdir d` shows at once and stores nothing, `rmdir d` removes it; `mkdir d2 && echo x > d2/f` stores `d2/f`",
		same, nil, mkdirIsLocalUntilAFileIsWritten},
	{"dd without oflag", "`dd bs=1M` of 3 MiB stores it whole", same, nil, ddStores()},
	{"dd oflag=sync is refused at open",
		"`O_SYNC` fails the open with `EINVAL` (a write cannot reach S3 by itself); nothing is stored",
		same, nil, ddIsRefusedAtOpen("oflag=sync")},
	{"dd oflag=dsync is refused at open",
		"`O_DSYNC` fails the open with `EINVAL`; nothing is stored",
		same, nil, ddIsRefusedAtOpen("oflag=dsync")},
	{"dd oflag=direct", "`O_DIRECT` writes store the file whole", same, nil, ddStores("oflag=direct")},
	{"dd oflag=nocache", "writes followed by `fadvise(DONTNEED)` store the file whole", same, nil, ddStores("oflag=nocache")},
	{"dd oflag=nonblock", "`O_NONBLOCK` writes store the file whole", same, nil, ddStores("oflag=nonblock")},
	{"dd oflag=noatime", "`O_NOATIME` writes store the file whole", same, nil, ddStores("oflag=noatime")},
	{"dd oflag=append of a new file",
		"`O_APPEND` writes to a new file (always at its end) store it whole",
		same, nil, ddStores("oflag=append")},
	{"dd oflag=append conv=notrunc onto an object is refused",
		"appending to an existing object fails with `EPERM`; the object is unchanged",
		same, nil, ddLeavesTheObject("oflag=append", "conv=notrunc")},
	{"dd conv=notrunc onto an object is refused",
		"writing an existing object opened without `O_TRUNC` fails with `EPERM`; the object is unchanged",
		different("refused at the first write, not at `open`: the kernel sends `O_TRUNC` as a truncation after the open, so the open cannot tell"),
		nil, ddLeavesTheObject("conv=notrunc")},
	{"dd conv=fsync", "`fsync` after the last write completes the upload, `close` then succeeds; stored whole", same, nil, ddStores("conv=fsync")},
	{"dd seek into a new file is refused",
		"`dd seek=1 conv=notrunc` writes first at 1 MiB of a new file: `EINVAL`, nothing is stored",
		same, nil, ddSeekIntoANewFileIsRefused},
	{"truncate -s 0 of an existing object empties it",
		"`truncate -s 0 f` (an open without `O_TRUNC`, then `ftruncate(0)`) stores an empty object",
		different("mount-s3 refuses the open with `EPERM` and keeps the object; here the truncation is taken as the open's `O_TRUNC`, which the kernel sends the same way"),
		nil, truncateToZeroEmptiesAnObject},
	{"truncate -s of a new file to another size is refused",
		"`truncate -s 1M` of a new file fails with `EPERM` and stores nothing",
		stricter("mount-s3 answers success without changing the size and stores an empty object"),
		nil, truncateOfANewFileIsRefused},
	{"cp of a sparse file leaves the object",
		"`cp` of a sparse 20 MiB file over an existing object seeks over the hole; that write fails with `EINVAL`, cp fails, and the previous object stays whole",
		same, nil, cpOfASparseFileLeavesTheObject},
	{"cp --sparse=never of a sparse file", "stores the file whole, zeros included", same, nil, cpOfASparseFileWithoutHoles},
	{"tar -x extracts but cannot set directory times",
		"every file is stored whole; tar exits 2 with only `Cannot utime: Operation not permitted` for its directories (a stored directory's times cannot change)",
		same, nil, tarExtractsButCannotSetDirectoryTimes},
	{"tar -xm extracts", "`tar -xmf` (no times) stores every file whole and exits 0", same, nil, tarExtractsWithoutTimes},
	{"rsync of a tree fails at its renames",
		"`rsync -r` writes each file under a temporary name and renames it; `rename` is `ENOSYS`, so rsync exits 23 and removes its temporary files, an empty file's included: nothing is left in the bucket",
		different("mount-s3 answers the `unlink` of an empty file whose upload waits for its release with `EPERM`, which rsync ignores, so an empty file's temporary can stay in the bucket"),
		nil, rsyncCannotRenameItsTemporaryFiles},
	{"rsync --inplace of a tree", "`rsync -r --inplace` stores every file whole and exits 0", same, nil, rsyncInplace},
	{"rsync -a --inplace of a tree",
		"stores every file whole; rsync exits 23 with only `failed to set times` errors",
		same, nil, rsyncArchiveInplace},
	{"awk writes a hundred files at once",
		"`awk '{print $2 > ($1\".txt\")}'` over 100 keys, as written and with `fflush` after each line (100 files holding data at once): every file stored, exit 0, no hang",
		same, nil, awkWritesAHundredFilesAtOnce},
	{"python writes a file", "`open('p.txt', 'w')`, `write`, `close` stores the file", same, nil, pythonWritesAFile},
	{"python os.replace is refused", "`os.replace` fails with `ENOSYS`; both names are unchanged", same, nil, pythonReplaceIsRefused},
	{"python write after fsync is refused",
		"`fsync` completes the upload; a later `write` fails with `EBADF` and `close` succeeds; the object holds what was written before `fsync`",
		different("`EBADF` where mount-s3 answers `EIO`"), nil, pythonWriteAfterFsyncIsRefused},
	{"rm of a file being written is refused",
		"`rm` of a file another program is writing fails with `EPERM`; the file is stored whole when its writer closes it",
		same, nil, rmOfAFileBeingWrittenIsRefused},
	{"rm -rf of a tree another client wrote", "exits 0 and deletes every object of the tree", same, nil, rmOfATreeAnotherClientWrote},
	{"a reader keeps the version it opened",
		"a reader on one mount reads on while a second mount replaces the object and a new open on the first mount reads the new version: the reader gets the version it opened or an error, never a byte of the new one",
		stricter("mount-s3 promises the same, but the kernel's page cache of a file, shared by its handles and dropped at each open, can serve its first reader the pages the later open read"),
		nil, aReaderKeepsTheVersionItOpened},
	{"overwrite of a file being read is refused",
		"`echo new > f` while another program holds `f` open for reading on the same mount fails with `EPERM`; the reader reads the old content whole",
		same, nil, overwriteOfAFileBeingReadIsRefused},
	{"read of a file being written is refused",
		"`cat f` while another program writes `f` (between two of its writes) fails with `EPERM`; after the writer's close `cat` reads the whole file",
		same, nil, readOfAFileBeingWrittenIsRefused},
	{"a second writer is refused", "`echo b > f` while another program writes `f` fails with `EPERM`; the first writer's content is stored", same, nil, aSecondWriterIsRefused},
	{"a file being written is invisible to another mount",
		"`cat f` on a second mount fails with `ENOENT` until the writer closes `f`, then reads it whole",
		same, nil, aFileBeingWrittenIsInvisibleToAnotherMount},
	{"an object another client wrote is readable at once",
		"listing and `cat` see a new object at once, without waiting for a metadata TTL",
		same, nil, anObjectAnotherClientWroteIsReadableAtOnce},
	{"a writer killed mid-file leaves what it wrote",
		"a writer of a 100 MiB file over an existing object, SIGKILLed after 50 MiB: the object is replaced by those 50 MiB (the kernel closes a killed process's files as an exiting one's, so the mounter cannot tell a kill from an exit)",
		same, nil, aWriterKilledMidFileLeavesWhatItWrote},
	{"modes 000 shut everyone out",
		"with `--dir-mode 000 --file-mode 000 --allow-other`, `ls` and `cat` by another user fail with `EACCES`",
		same, modesZero, modesZeroShutEveryoneOut},
	{"chmod is refused", "`chmod` fails with `EPERM`; the mode is unchanged",
		stricter("mount-s3 answers success and keeps the mode, so a tool that sets another mode (`install -m 600`, `cp -p` of a 0600 file) fails here and passes there"), nil, chmodIsRefused},
	{"links are refused", "`ln -s` fails with `ENOSYS` and `ln` with `EPERM`; nothing is stored",
		different("mount-s3 answers `EPERM` to `ln -s` too"), nil, linksAreRefused},
}

// TestConformance runs every behavior of the suite through its own bucket and mount, with the
// programs running as nobody.
func TestConformance(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the conformance suite mounts FUSE and runs programs as nobody: run it as root")
	}
	requirePrograms(t)
	bin := mounterBinary(t)
	server := testenv.StartS3(t)
	for i, b := range suite {
		t.Run(b.name, func(t *testing.T) {
			b.run(newEnv(t, server, bin, fmt.Sprintf("conformance-%02d", i), b.options))
		})
	}
}

// mounterBinary builds s3csi-mounter as its image builds it, or returns the binary
// S3CSI_CONFORMANCE_MOUNTER names.
func mounterBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(mounterEnv); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "s3csi-mounter")
	if err := testenv.GoBuild(t.Context(), "..", "./cmd/s3csi-mounter", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}
