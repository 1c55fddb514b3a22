package s3fs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

func TestPlanMemory(t *testing.T) {
	const mib = 1 << 20
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name           string
		opts           mountargs.Options
		containerLimit int64
		total, buffers int64
		from           string
	}{
		{name: "nothing set: the default buffers", total: 640 * mib, buffers: 512 * mib, from: "the default"},
		{name: "a container limit: three quarters of it, a quarter of that left beside the buffers",
			containerLimit: 256 * mib, total: 192 * mib, buffers: 144 * mib, from: "the container's memory limit"},
		{name: "a small container limit keeps 32 MiB beside the buffers",
			containerLimit: 96 * mib, total: 72 * mib, buffers: 40 * mib, from: "the container's memory limit"},
		{name: "a tiny container limit still leaves one part", containerLimit: 48 * mib, total: 36 * mib, buffers: 8 * mib,
			from: "the container's memory limit"},
		{name: "--memory-target wins over the container", opts: mountargs.Options{MemoryTarget: u(1024)},
			containerLimit: 256 * mib, total: 1024 * mib, buffers: 768 * mib, from: "--memory-target"},
		{name: "--max-memory-target sets the buffers, even above the container's limit",
			opts: mountargs.Options{MaxMemoryTarget: u(512)}, containerLimit: 48 * mib, total: 640 * mib, buffers: 512 * mib,
			from: "--max-memory-target"},
		{name: "both: the buffers are the smaller answer", opts: mountargs.Options{MemoryTarget: u(1024), MaxMemoryTarget: u(100)},
			total: 1024 * mib, buffers: 100 * mib, from: "--memory-target"},
		{name: "never less than a write part", opts: mountargs.Options{MemoryTarget: u(16), WritePartSize: u(64 * mib)},
			total: 16 * mib, buffers: 64 * mib, from: "--memory-target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanMemory(&tc.opts, tc.containerLimit)
			if p.Total != tc.total || p.Buffers != tc.buffers || p.From != tc.from {
				t.Errorf("PlanMemory = total %d MiB, buffers %d MiB, from %q; want %d, %d, %q",
					p.Total/mib, p.Buffers/mib, p.From, tc.total/mib, tc.buffers/mib, tc.from)
			}
		})
	}
}

func TestMemoryLimitIsTheSmallestOnTheCgroupPath(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kubepods/pod1/memory.max", "268435456\n")
	write("kubepods/pod1/ctr/memory.max", "max\n")
	write("kubepods/memory.max", "1073741824\n")
	write("memory/memory.limit_in_bytes", "209715200\n") // a v1 container's own view
	write("memory/kubepods/podA/memory.limit_in_bytes", "9223372036854771712\n")
	write("memory/kubepods/podA/ctr/memory.limit_in_bytes", "104857600\n")
	write("v2", "0::/kubepods/pod1/ctr\n")
	write("v2-container-without-limit", "0::/\n")
	write("v1-host", "9:name=systemd:/\n4:memory:/kubepods/podA/ctr\n0::/\n")
	write("v1-container", "4:cpu,memory:/kubepods/burstable/podB/ctr\n")
	write("v1-other-controllers", "3:cpuset:/x\n")
	for _, tc := range []struct {
		name, procCgroup string
		want             int64
	}{
		{"v2: the pod's limit under an unlimited container", "v2", 256 << 20},
		{"v2: a container without a limit", "v2-container-without-limit", 0},
		{"v1: the container's limit under an unlimited pod", "v1-host", 100 << 20},
		{"v1: a container that sees its own cgroup at the root", "v1-container", 200 << 20},
		{"v1 without a memory hierarchy", "v1-other-controllers", 0},
		{"no /proc entry", "absent", 0},
	} {
		if got := memoryLimitUnder(root, filepath.Join(root, tc.procCgroup)); got != tc.want {
			t.Errorf("%s: limit %d, want %d", tc.name, got, tc.want)
		}
	}
}
