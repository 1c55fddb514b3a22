package bench

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pinCores gives the S3 server (serverPid) the first half of this process's CPUs and this
// process the rest, so that the ceiling measured is the client's, not what is left to it by
// the server. The clients and fio started after it inherit the client cores. It does nothing,
// and says so, on a machine with a single CPU. The benchmark's own affinity is restored at the
// end.
func pinCores(b *testing.B, serverPid int) {
	b.Helper()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		b.Fatalf("read CPU affinity: %v", err)
	}
	var cpus []int
	for cpu := range 1024 {
		if all.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) < 2 {
		b.Logf("one CPU (%v): the S3 server and the clients share it", cpus)
		return
	}
	var server, client unix.CPUSet
	half := len(cpus) / 2
	for i, cpu := range cpus {
		if i < half {
			server.Set(cpu)
		} else {
			client.Set(cpu)
		}
	}
	if err := setProcessAffinity(serverPid, &server); err != nil {
		b.Fatalf("pin the S3 server: %v", err)
	}
	if err := setProcessAffinity(os.Getpid(), &client); err != nil {
		b.Fatalf("pin the benchmark: %v", err)
	}
	b.Cleanup(func() { _ = setProcessAffinity(os.Getpid(), &all) })
	b.Logf("CPUs %v: S3 server on %v, clients and fio on %v", cpus, cpus[:half], cpus[half:])
}

// setProcessAffinity sets the affinity of every thread of pid: sched_setaffinity applies to one
// thread, and threads created afterwards inherit their creator's.
func setProcessAffinity(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH { //nolint:errorlint // a raw errno
			return fmt.Errorf("thread %d: %w", tid, err)
		}
	}
	return nil
}

// touchFreeMemory maps and writes all but warmHeadroom of the machine's available memory once,
// then frees it. On a virtual machine the host backs guest memory lazily, and one with free
// page reporting (virtio-balloon) hands pages the guest freed back to the host: the first write
// to such a page costs a fault in the host, several times the cost of the write itself. A FUSE
// client's reads fill new page-cache pages, which a raw GET does not, so they alone would pay
// it. On this VM the same sequential read ran at 300-1500 MB/s depending on whether its pages
// had been used; the profile of a slow run was 80% kernel memcpy into the page cache. With the
// memory touched, and kept from being reported (keepFreedPages), the runs see the memory of a
// node whose memory is in use. It costs about 3 s per GiB when the host has reclaimed it.
func touchFreeMemory(b *testing.B) {
	b.Helper()
	available, err := memAvailable()
	if err != nil {
		b.Fatalf("read /proc/meminfo: %v", err)
	}
	const chunk = 1 << 30
	var maps [][]byte
	defer func() {
		for _, m := range maps {
			_ = unix.Munmap(m)
		}
	}()
	start := time.Now()
	for touched := int64(0); touched+chunk <= available-warmHeadroom; touched += chunk {
		// MAP_POPULATE makes the kernel allocate and zero every page now.
		m, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
		if err != nil {
			b.Fatalf("touch free memory: %v", err)
		}
		maps = append(maps, m)
	}
	b.Logf("touched %d GiB of memory in %s", len(maps), time.Since(start).Round(time.Second))
}

// warmHeadroom is the memory touchFreeMemory leaves alone, for everything else on the machine.
const warmHeadroom = 2 << 30

func memAvailable() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no MemAvailable in /proc/meminfo")
}

// pageReporting holds the settings of the page-reporting module (where the kernel has it)
// that decide when the guest reports a free page to the host: how long it must have been free
// (0: at once; at most 5 minutes) and how much free memory may wait unreported.
var pageReporting = []struct{ file, value string }{
	{"/sys/module/page_reporting/parameters/min_free_ms", "300000"},
	{"/sys/module/page_reporting/parameters/max_waiting_mib", "65536"},
}

// keepFreedPages makes the guest keep free pages unreported for 5 minutes, so that the pages
// touchFreeMemory and each run free stay backed for the next runs, and restores the settings
// when the benchmark ends. A kernel without them reports free pages as it decides: the
// benchmark says so and goes on.
func keepFreedPages(b *testing.B) {
	b.Helper()
	for _, set := range pageReporting {
		old, err := os.ReadFile(set.file)
		if err != nil {
			b.Logf("no %s (%v): free pages are reported as the kernel decides", set.file, err)
			return
		}
		if err := os.WriteFile(set.file, []byte(set.value), 0); err != nil {
			b.Fatalf("delay free page reporting: %v", err)
		}
		b.Logf("%s set to %s for the benchmark (was %s)", set.file, set.value, strings.TrimSpace(string(old)))
		b.Cleanup(func() {
			if err := os.WriteFile(set.file, old, 0); err != nil {
				b.Errorf("restore %s to %s: %v", set.file, old, err)
			}
		})
	}
}
