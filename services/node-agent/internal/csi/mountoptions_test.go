package csi_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv/testfs"

	"github.com/s3csi/s3csi/services/node-agent/internal/csi"
	"github.com/s3csi/s3csi/services/node-agent/internal/health"
)

// TestAScalityVolumeMountsAndItsWorkloadIsToldWhatIsIgnored publishes a PersistentVolume
// written for the Scality v2 driver (its debug-logging, retry and local-cache examples in one):
// the options that work reach the mounter (aws-max-attempts, the cache under a name, debug),
// those that only tuned mount-s3 do not (debug-crt, the cache's host path), and the workload
// gets one Warning Event naming each and why, not one more per republish.
func TestAScalityVolumeMountsAndItsWorkloadIsToldWhatIsIgnored(t *testing.T) {
	var monitor *health.Monitor
	n := startNode(t, nodeOptions{fallback: 200 * time.Millisecond,
		warnWorkload: func(ctx context.Context, pod types.NamespacedName, uid types.UID, reason, msg string) {
			monitor.WarnWorkload(ctx, pod, uid, reason, msg)
		}})
	monitor = health.New(n.kubelet.Root, n.name, mppod.DefaultNamespace, time.Hour, apiServer.Client, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	workload := createWorkload(ctx, t, n)
	pv, uid := "pv-scality", workload.UID
	mpName := mppod.Name(string(uid), pv)
	n.createMountpointPod(mpName)
	flags := []string{"allow-delete", "region us-west-2", "aws-max-attempts 5", "debug", "debug-crt", "cache /tmp/s3-pv1-cache"}
	n.assign(pv, "vol-scality", string(uid), mpName, mountOptions(flags...))
	target := n.target(uid, pv)
	req := publishRequest("vol-scality", target, "bucket-b", uid, flags...)
	req.VolumeContext["csi.storage.k8s.io/pod.name"] = workload.Name
	req.VolumeContext["csi.storage.k8s.io/pod.namespace"] = workload.Namespace
	for range 2 { // a publish, then kubelet's periodic republish
		if _, err := n.client.NodePublishVolume(ctx, req); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}

	args := readFile(t, filepath.Join(target, testfs.ArgsName))
	for _, want := range []string{"--allow-delete", "--region=us-west-2", "--aws-max-attempts=5", "--debug", "--cache=s3-pv1-cache"} {
		if !slices.Contains(strings.Split(args, "\n"), want) {
			t.Errorf("the mounter got %q, without %s", args, want)
		}
	}
	for _, dropped := range []string{"debug-crt", "/tmp"} {
		if strings.Contains(args, dropped) {
			t.Errorf("the mounter got %q, with %s", args, dropped)
		}
	}
	events := eventsOf(ctx, t, workload, csi.ReasonMountOptionsIgnored)
	if len(events) != 1 {
		t.Fatalf("%d %s Events on the workload, want 1: %v", len(events), csi.ReasonMountOptionsIgnored, events)
	}
	for _, want := range []string{"PersistentVolume pv-scality: ", `mount option "debug-crt" is ignored: s3csi-mounter has no AWS Common Runtime`,
		`mount option "cache /tmp/s3-pv1-cache" names the cache "s3-pv1-cache"`, "docs/mount-options.md"} {
		if !strings.Contains(events[0].Message, want) {
			t.Errorf("the Event says %q, without %q", events[0].Message, want)
		}
	}
	if e := events[0]; e.Type != "Warning" || e.InvolvedObject.Name != workload.Name {
		t.Errorf("the Event is a %s Event on %s, want a Warning on %s", e.Type, e.InvolvedObject.Name, workload.Name)
	}
	if got := n.logs.count("Mount options of the PersistentVolume are ignored or changed"); got != 1 {
		t.Errorf("the node-agent logged the ignored options %d times, want once:\n%s", got, n.logs.all())
	}
}
