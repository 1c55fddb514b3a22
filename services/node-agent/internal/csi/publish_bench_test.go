package csi_test

import (
	"context"
	"slices"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/mppod"
)

// samplesPerRun is the number of publishes measured per benchmark iteration: percentiles need
// more than one sample, and one fallback-bound publish takes up to the 2 s period.
const samplesPerRun = 20

// BenchmarkPublishSecondWorkload measures NodePublishVolume for a new workload on a volume
// already mounted on the node, from the moment the workload pod is bound: at that instant the
// reconciler records the workload (and, with events, publishes attachment.assigned) while
// kubelet calls NodePublishVolume. "events" wakes on the event; "fallback" has no bus and
// relies on the 2 s re-read.
func BenchmarkPublishSecondWorkload(b *testing.B) {
	for _, mode := range []string{"events", "fallback"} {
		b.Run(mode, func(b *testing.B) {
			benchPublish(b, mode == "events")
		})
	}
}

func benchPublish(b *testing.B, withEvents bool) {
	n := startNode(b, nodeOptions{})
	var bs *bus
	if withEvents {
		bs = startBus(n.t, n)
	}
	ctx := context.Background()
	pv, first := "pv-bench", string(uuid.NewUUID())
	mpName := mppod.Name(first, pv)
	n.createMountpointPod(mpName)
	s3pa := n.assign(pv, "vol", first, mpName)
	if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol", n.target(uuidOf(first), pv), "bucket-b", uuidOf(first))); err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	b.ResetTimer()
	for b.Loop() {
		for range samplesPerRun {
			uid := string(uuid.NewUUID())
			target := n.target(uuidOf(uid), pv)
			bound := time.Now()
			errc := publishAsync(ctx, n, "vol", target, uid)
			if err := recordWorkload(ctx, s3pa, mpName, uid); err != nil {
				b.Fatal(err)
			}
			if bs != nil {
				bs.assigned(n.t, n.name, pv, uid, mpName)
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(bound))
		}
	}
	b.StopTimer()
	slices.Sort(samples)
	pct := func(p float64) float64 { return float64(samples[int(p*float64(len(samples)-1))].Milliseconds()) }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// recordWorkload adds uid to the attachment as the pod-reconciler does, re-reading on conflict.
func recordWorkload(ctx context.Context, s3pa *s3csiv2.MountpointS3PodAttachment, mpName, uid string) error {
	for {
		var cur s3csiv2.MountpointS3PodAttachment
		if err := apiServer.Client.Get(ctx, client.ObjectKeyFromObject(s3pa), &cur); err != nil {
			return err
		}
		cur.Spec.MountpointS3PodAttachments[mpName] = append(cur.Spec.MountpointS3PodAttachments[mpName],
			s3csiv2.WorkloadAttachment{WorkloadPodUID: uid, AttachmentTime: metav1.Now()})
		err := apiServer.Client.Update(ctx, &cur)
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// BenchmarkPeriodicRepublish is scenario S14, kubelet's periodic republish of every volume of a
// driver with requiresRepublish: republishTargets workloads share one mounted volume, and each
// round republishes every target with its unchanged request, as kubelet does each sync period.
// It reports a republish's p50 and p99, the API reads per republish (the first republish of a
// target checks its attachment, later identical ones do not) and the info-level log lines per
// republish.
func BenchmarkPeriodicRepublish(b *testing.B) {
	const republishTargets, rounds = 50, 10
	n := startNode(b, nodeOptions{})
	ctx := context.Background()
	pv, first := "pv-storm", string(uuid.NewUUID())
	mpName := mppod.Name(first, pv)
	n.createMountpointPod(mpName)
	s3pa := n.assign(pv, "vol", first, mpName)
	var requests []*csipb.NodePublishVolumeRequest
	for i := range republishTargets {
		uid := first
		if i > 0 {
			uid = string(uuid.NewUUID())
			if err := recordWorkload(ctx, s3pa, mpName, uid); err != nil {
				b.Fatal(err)
			}
		}
		r := publishRequest("vol", n.target(uuidOf(uid), pv), "bucket-b", uuidOf(uid))
		if _, err := n.client.NodePublishVolume(ctx, r); err != nil {
			b.Fatalf("publish %d: %v", i, err)
		}
		requests = append(requests, r)
	}
	finds, infoLines := n.finds.Load(), n.logs.count(`"level"=0`)
	var samples []time.Duration
	b.ResetTimer()
	for b.Loop() {
		for range rounds {
			for _, r := range requests {
				start := time.Now()
				if _, err := n.client.NodePublishVolume(ctx, r); err != nil {
					b.Fatalf("republish %s: %v", r.TargetPath, err)
				}
				samples = append(samples, time.Since(start))
			}
		}
	}
	b.StopTimer()
	slices.Sort(samples)
	pct := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(n.finds.Load()-finds)/float64(len(samples)), "API-reads/republish")
	b.ReportMetric(float64(n.logs.count(`"level"=0`)-infoLines)/float64(len(samples)), "info-lines/republish")
	b.ReportMetric(0, "ns/op")
}
