package controller_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// BenchmarkCreateVolume measures CreateVolume against versitygw: a new volume (probe, create,
// tag) and a retry of an existing one (probe only), the call the provisioner repeats after a
// timeout.
func BenchmarkCreateVolume(b *testing.B) {
	e := newBenchEnv(b)
	ctx := b.Context()
	b.Run("new volume", func(b *testing.B) {
		start := time.Now()
		for i := range b.N {
			if _, err := e.ctrl.CreateVolume(ctx, createReq("pvc-bench-"+strconv.Itoa(i))); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N)/1000, "ms/volume")
	})
	b.Run("retry of an existing volume", func(b *testing.B) {
		req := createReq("pvc-bench-retry")
		if _, err := e.ctrl.CreateVolume(ctx, req); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for range b.N {
			if _, err := e.ctrl.CreateVolume(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N)/1000, "ms/retry")
	})
	b.Run("delete of an empty volume", func(b *testing.B) {
		ids := make([]string, b.N)
		for i := range b.N {
			resp, err := e.ctrl.CreateVolume(ctx, createReq("pvc-bench-del-"+strconv.Itoa(i)))
			if err != nil {
				b.Fatal(err)
			}
			ids[i] = resp.GetVolume().GetVolumeId()
		}
		b.ResetTimer()
		start := time.Now()
		for _, id := range ids {
			if _, err := e.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N)/1000, "ms/delete")
	})
}
