package s3fs

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// MemoryPlan is how a mount spends memory: Total is the whole process's target (the Go memory
// limit the caller sets), Buffers the part of it reserved for read-ahead and upload buffers.
//
// Problem: a Mountpoint Pod with a memory limit was OOM-killed when its buffers (512 MiB by
// default) and the rest of the process did not fit under the limit.
// Solution: without an explicit target, the target follows the container's limit.
// Invariant: Buffers + the headroom the rest of the process needs <= Total, except that Buffers
// never drops below one read part and one write part (a mount must make progress).
type MemoryPlan struct {
	Total   int64
	Buffers int64
	// From says where Total came from, for the mount's log line.
	From string
}

// memoryHeadroom is the memory allowed beyond the data buffers (metadata, requests, runtime)
// when the buffers are given: DefaultMemoryTarget or --max-memory-target.
const memoryHeadroom = 128 << 20

// minHeadroom is the least of a whole target left to the rest of the process; the headroom is
// a quarter of the target above 128 MiB.
const minHeadroom = 32 << 20

// containerShare is the part of the container's memory limit a mount targets when no option
// sets one: the rest absorbs what the Go collector lets pass its limit.
const containerShare = 0.75

// PlanMemory decides the memory of a mount from its options and the container's memory limit
// (0: none), in this order: --memory-target (the whole process), --max-memory-target (the
// buffers), three quarters of the container's limit, DefaultMemoryTarget of buffers. When both
// options are set the buffers are the smaller of the two answers.
func PlanMemory(o *mountargs.Options, containerLimit int64) MemoryPlan {
	var p MemoryPlan
	switch {
	case o.MemoryTarget != nil:
		p.Total, p.From = int64(*o.MemoryTarget)<<20, "--memory-target" //nolint:gosec // bounded by the parser
	case o.MaxMemoryTarget != nil:
		p.Buffers = int64(*o.MaxMemoryTarget) << 20 //nolint:gosec // bounded by the parser
		p.Total, p.From = p.Buffers+memoryHeadroom, "--max-memory-target"
	case containerLimit > 0:
		p.Total, p.From = int64(float64(containerLimit)*containerShare), "the container's memory limit"
	default:
		p.Buffers = DefaultMemoryTarget
		p.Total, p.From = p.Buffers+memoryHeadroom, "the default"
	}
	if p.Buffers == 0 {
		p.Buffers = p.Total - max(minHeadroom, p.Total/4)
	}
	if o.MaxMemoryTarget != nil {
		p.Buffers = min(p.Buffers, int64(*o.MaxMemoryTarget)<<20) //nolint:gosec // bounded by the parser
	}
	read := int64(o.EffectiveReadPartSize(DefaultPartSize))   //nolint:gosec // bounded by the parser
	write := int64(o.EffectiveWritePartSize(DefaultPartSize)) //nolint:gosec // bounded by the parser
	p.Buffers = max(p.Buffers, read, write)
	return p
}

// ApplyMemoryPlan plans the memory of the process's one mount (PlanMemory with
// ContainerMemoryLimit), sets the Go memory limit to its total unless GOMEMLIMIT is set, logs
// the plan, and returns it for Config.Memory. Only a process that serves one mount calls it.
func ApplyMemoryPlan(o *mountargs.Options, log logr.Logger) MemoryPlan {
	p := PlanMemory(o, ContainerMemoryLimit())
	if os.Getenv("GOMEMLIMIT") == "" {
		// Buffers are recycled, but garbage from requests would otherwise let the heap grow to
		// twice the live size: the collector keeps the process near its target.
		debug.SetMemoryLimit(p.Total)
	}
	log.Info("Memory plan", "targetMiB", p.Total>>20, "buffersMiB", p.Buffers>>20, "from", p.From)
	return p
}

// ContainerMemoryLimit is the smallest memory limit on the path of this process's memory
// cgroup that it can see (in a container, its own cgroup's), cgroup v2 or v1, or 0 when none is
// set or the cgroup cannot be read.
func ContainerMemoryLimit() int64 {
	return memoryLimitUnder("/sys/fs/cgroup", "/proc/self/cgroup")
}

// unlimitedV1 is where cgroup v1 memory.limit_in_bytes values mean "no limit" (the kernel
// reports the largest page-aligned int64).
const unlimitedV1 = 1 << 62

func memoryLimitUnder(root, procCgroup string) int64 {
	b, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0
	}
	var limit int64
	for line := range strings.Lines(string(b)) {
		// hierarchy-ID:controllers:path; v2 is "0::path", v1 names its controllers.
		fields := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(fields) != 3 {
			continue
		}
		base, file := root, "memory.max"
		switch {
		case fields[0] == "0" && fields[1] == "":
		case slices.Contains(strings.Split(fields[1], ","), "memory"):
			base, file = filepath.Join(root, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		// Inside a container the cgroup's path may not exist under base (base is then the
		// container's own cgroup): walking up reaches base either way.
		for dir := filepath.Join(base, filepath.Clean("/"+fields[2])); ; dir = filepath.Dir(dir) {
			if v := readLimit(filepath.Join(dir, file)); v > 0 && (limit == 0 || v < limit) {
				limit = v
			}
			if dir == base || !strings.HasPrefix(dir, base) {
				break
			}
		}
	}
	return limit
}

// readLimit reads a memory limit file; 0 for none, "max" or an unreadable file.
func readLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v >= unlimitedV1 {
		return 0
	}
	return v
}
