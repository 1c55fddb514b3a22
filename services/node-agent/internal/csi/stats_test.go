package csi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/s3csi/s3csi/services/node-agent/internal/csi"
)

// volumeStats calls NodeGetVolumeStats for target and returns its condition as kubelet reads it.
func volumeStats(ctx context.Context, t *testing.T, n *node, volumeID, target string) (*csipb.NodeGetVolumeStatsResponse, bool, string) {
	t.Helper()
	start := time.Now()
	rsp, err := n.client.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: volumeID, VolumePath: target})
	if err != nil {
		t.Fatalf("NodeGetVolumeStats: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("NodeGetVolumeStats took %s", took)
	}
	if len(rsp.GetUsage()) == 0 {
		t.Fatal("no usage: kubelet refuses such an answer when its CSIVolumeHealth gate is off")
	}
	abnormal, message, ok := csi.VolumeCondition(rsp)
	if !ok {
		t.Fatalf("the answer carries no volume condition: %v", rsp)
	}
	return rsp, abnormal, message
}

func TestVolumeStatsTellWhetherTheMountAnswers(t *testing.T) {
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	caps, err := n.client.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var advertised []int32
	for _, c := range caps.GetCapabilities() {
		advertised = append(advertised, int32(c.GetRpc().GetType()))
	}
	for _, want := range []int32{int32(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS), 4 /* VOLUME_CONDITION of spec 1.9 */} {
		found := false
		for _, a := range advertised {
			found = found || a == want
		}
		if !found {
			t.Fatalf("capabilities %v do not include %d", advertised, want)
		}
	}

	live := publishOnNewMountpointPod(ctx, t, n, "pv-stats-live")
	rsp, abnormal, message := volumeStats(ctx, t, n, "vol-pv-stats-live", live.target)
	if abnormal {
		t.Fatalf("a live mount is abnormal: %q", message)
	}
	if rsp.GetUsage()[0].GetUnit() != csipb.VolumeUsage_BYTES || rsp.GetUsage()[1].GetUnit() != csipb.VolumeUsage_INODES {
		t.Fatalf("usage = %v, want bytes then inodes", rsp.GetUsage())
	}

	t.Run("a stopped server is abnormal, and the answer does not wait for it", func(t *testing.T) {
		stopped := publishOnNewMountpointPod(ctx, t, n, "pv-stats-stopped")
		stopped.mp.stop(t)
		_, abnormal, message := volumeStats(ctx, t, n, "vol-pv-stats-stopped", stopped.target)
		if !abnormal || !strings.Contains(message, "does not answer") || !strings.Contains(message, stopped.mpName) {
			t.Fatalf("condition = %v %q, want abnormal, not answering, naming %s", abnormal, message, stopped.mpName)
		}
	})
	t.Run("a killed server is abnormal, naming its Mountpoint Pod", func(t *testing.T) {
		dead := publishOnNewMountpointPod(ctx, t, n, "pv-stats-dead")
		dead.mp.kill(t)
		_, abnormal, message := volumeStats(ctx, t, n, "vol-pv-stats-dead", dead.target)
		if !abnormal || !strings.Contains(message, "transport endpoint is not connected") || !strings.Contains(message, dead.mpName) {
			t.Fatalf("condition = %v %q, want abnormal, dead, naming %s", abnormal, message, dead.mpName)
		}
		t.Run("and stays abnormal after a republish mounted it again, until the pod is unpublished", func(t *testing.T) {
			if err := dead.mp.start(t, false); err != nil { // kubelet restarts the container
				t.Fatal(err)
			}
			if _, err := n.client.NodePublishVolume(ctx, publishRequest("vol-pv-stats-dead", dead.target, "bucket-pv-stats-dead", dead.uid)); err != nil {
				t.Fatalf("republish: %v", err)
			}
			_, abnormal, message := volumeStats(ctx, t, n, "vol-pv-stats-dead", dead.target)
			if !abnormal || !strings.Contains(message, "restart this pod") {
				t.Fatalf("condition after the republish = %v %q, want abnormal: the containers hold the dead mount", abnormal, message)
			}
			if err := unpublish(ctx, n, dead.target); err != nil {
				t.Fatal(err)
			}
			_, err := n.client.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-pv-stats-dead", VolumePath: dead.target})
			if status.Code(err) != codes.NotFound {
				t.Fatalf("stats of an unpublished target: %v, want NOT_FOUND", err)
			}
		})
	})

	for _, tc := range []struct {
		name     string
		req      *csipb.NodeGetVolumeStatsRequest
		want     codes.Code
		contains string
	}{
		{"no volume id", &csipb.NodeGetVolumeStatsRequest{VolumePath: live.target}, codes.InvalidArgument, "volume id"},
		{"no path", &csipb.NodeGetVolumeStatsRequest{VolumeId: "v"}, codes.InvalidArgument, "volume path"},
		{"a path that is no kubelet target", &csipb.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: "/etc"}, codes.NotFound, "kubelet dir"},
		{"a relative path", &csipb.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: "some/path"}, codes.NotFound, "clean absolute path"},
		{"a target nothing is mounted at", &csipb.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: n.target(uuid.NewUUID(), "pv-none")}, codes.NotFound, "nothing is mounted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.client.NodeGetVolumeStats(ctx, proto.CloneOf(tc.req))
			if status.Code(err) != tc.want || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("NodeGetVolumeStats: %v, want %s mentioning %q", err, tc.want, tc.contains)
			}
		})
	}
}
