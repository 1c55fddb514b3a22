package main

import (
	"strings"
	"testing"
)

const output = `== bench shared
goos: linux
pkg: github.com/s3csi/s3csi/shared/events
BenchmarkReadStream-2   	      12	  95432123 ns/op	     10480 events/s	  1234 B/op	  12 allocs/op
PASS
ok  	github.com/s3csi/s3csi/shared/events	3.2s
pkg: github.com/s3csi/s3csi/integration/e2e
BenchmarkPodStart/a-emptyDir-2   	       1	1113479298 ns/op	      1003 p50-ms	      1341 p99-ms
--- BENCH: BenchmarkPodStart/a-emptyDir-2
    podstart_bench_test.go:64: pod starts in order, ms: [1003 1341]
BenchmarkPodStart/c-second-pod-2 	       1	 978655159 ns/op	       -13.18 p50-over-emptyDir-ms
BenchmarkPodsOnVolumesAtOnce-2   	       1	         0 ns/op	         6.377 all-gone-s
BenchmarkLongName
BenchmarkLongName-2   	 3	 1.5e+06 ns/op
`

func TestTableHasARowPerResultAndNothingElse(t *testing.T) {
	var out strings.Builder
	failed, err := table(strings.NewReader(output), &out)
	if err != nil || failed {
		t.Fatalf("table() = %v, %v", failed, err)
	}
	want := `| package | benchmark | figures |
|---|---|---|
| github.com/s3csi/s3csi/shared/events | BenchmarkReadStream | 95432123 ns/op, 10480 events/s, 1234 B/op, 12 allocs/op |
| github.com/s3csi/s3csi/integration/e2e | BenchmarkPodStart/a-emptyDir | 1113479298 ns/op, 1003 p50-ms, 1341 p99-ms |
| github.com/s3csi/s3csi/integration/e2e | BenchmarkPodStart/c-second-pod | 978655159 ns/op, -13.18 p50-over-emptyDir-ms |
| github.com/s3csi/s3csi/integration/e2e | BenchmarkPodsOnVolumesAtOnce | 6.377 all-gone-s |
| github.com/s3csi/s3csi/integration/e2e | BenchmarkLongName | 1.5e+06 ns/op |
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestAFailedBenchmarkIsReported(t *testing.T) {
	for _, line := range []string{"--- FAIL: BenchmarkPodStart/b-first-pod-on-a-volume", "FAIL\tgithub.com/s3csi/s3csi/integration/e2e\t12.1s"} {
		var out strings.Builder
		failed, err := table(strings.NewReader(output+line+"\n"), &out)
		if err != nil || !failed {
			t.Errorf("table() with %q = %v, %v; want failed", line, failed, err)
		}
	}
}
