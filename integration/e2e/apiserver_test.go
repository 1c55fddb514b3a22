//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// apiServerDown is how long the API server stays stopped once it has exited.
const apiServerDown = 8 * time.Second

// The API server restarted while a pod mounts a volume: the pod is scheduled, then the API
// server stops (the Mountpoint Pod, its attachment or the publish may be under way), and comes
// back. A reader of another volume reads on through the outage (no live mount depends on the
// API server); the new pod mounts and reads once the API server is back, on exactly one
// Mountpoint Pod and one attachment.
func TestAPIServerRestartedWhileAPodMounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := namespace(t, "apiserver")
	staticClaim(ctx, t, ns, "live")
	pv := staticClaim(ctx, t, ns, "data")
	reader := busybox(ns, "reader", "while true; do if [ \"$(cat /live/seed.txt)\" = seed ]; then echo read; else echo READ-FAILED; fi; sleep 0.2; done",
		claimVolume("live", "live"))
	create(ctx, t, reader)
	waitRunning(ctx, t, reader)

	pod := busybox(ns, "mounting", "echo \"$(cat /data/seed.txt)\"; sleep 3600", claimVolume("data", "data"))
	create(ctx, t, pod)
	eventually(ctx, t, "the pod scheduled", func() error {
		if err := getPod(ctx, pod); err != nil {
			return err
		}
		if pod.Spec.NodeName == "" {
			return fmt.Errorf("not scheduled")
		}
		return nil
	})
	stopped := time.Now()
	if err := cfg.RestartAPIServer(ctx, apiServerDown); err != nil {
		t.Fatal(err)
	}
	t.Logf("the API server was back %v after it was stopped", time.Since(stopped).Round(10*time.Millisecond))
	waitRunning(ctx, t, pod)
	eventually(ctx, t, "the pod reading its volume", func() error {
		if out := podLog(ctx, t, pod); out != "seed\n" {
			return fmt.Errorf("printed %q", out)
		}
		return nil
	})
	t.Logf("from stopping the API server to the pod reading: %v", time.Since(stopped).Round(10*time.Millisecond))
	atts, mps, err := attachmentsOf(ctx, pv.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 1 || len(mps) != 1 {
		t.Errorf("%d attachments and %d Mountpoint Pods serve the volume, want one each", len(atts), len(mps))
	}
	if out := podLog(ctx, t, reader); strings.Contains(out, "READ-FAILED") || !strings.HasSuffix(out, "read\n") {
		t.Fatalf("the reader failed while the API server was down:\n%s", lastLines(out, 5))
	}
}
