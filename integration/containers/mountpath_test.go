//go:build containers

package containers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

// volume is a provisioned volume: its PV, bound to claim "data" in the default namespace.
type volume struct {
	id     string
	bucket string
	pv     *corev1.PersistentVolume
	ctx    map[string]string
}

// provision creates a volume as external-provisioner does: CreateVolume on the controller's
// socket, then the PV and its bound claim, and puts one object in the bucket.
func (s *stack) provision(ctx context.Context, controller csipb.ControllerClient, claim string) volume {
	s.t.Helper()
	resp, err := controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name:               "pvc-" + string(uuid.NewUUID()),
		VolumeCapabilities: []*csipb.VolumeCapability{mountCapability()},
		Parameters:         map[string]string{"emptyBucketOnDelete": "true"},
	})
	if err != nil {
		s.t.Fatalf("CreateVolume: %v", err)
	}
	v := volume{id: resp.Volume.VolumeId, bucket: resp.Volume.VolumeContext["bucketName"], ctx: resp.Volume.VolumeContext}
	if _, err := s.s3.RootClient().PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(v.bucket), Key: aws.String("dir/hello.txt"), Body: strings.NewReader("from S3"),
	}); err != nil {
		s.t.Fatalf("put an object in the new bucket %q: %v", v.bucket, err)
	}
	v.pv = fixture.PV("pv-"+claim, fixture.WithVolumeHandle(v.id), fixture.PreBoundTo(fixture.DefaultNamespace, claim))
	v.pv.Spec.CSI.VolumeAttributes = v.ctx
	v.pv.Spec.MountOptions = []string{"allow-delete"}
	for _, obj := range []client.Object{v.pv, fixture.PVC(claim, fixture.WithVolumeName(v.pv.Name))} {
		if err := s.api.Client.Create(ctx, obj); err != nil {
			s.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	return v
}

// schedule creates a workload pod on claim and binds it to the node, as the scheduler does.
func (s *stack) schedule(ctx context.Context, name, claim string) *corev1.Pod {
	s.t.Helper()
	pod := fixture.Pod(name, fixture.WithClaim("data", claim))
	if err := s.api.Client.Create(ctx, pod); err != nil {
		s.t.Fatalf("create pod %s: %v", name, err)
	}
	if err := s.api.Client.SubResource("binding").Create(ctx, pod, fixture.Binding(pod, s.node)); err != nil {
		s.t.Fatalf("bind pod %s: %v", name, err)
	}
	return pod
}

// publish calls NodePublishVolume for pod as kubelet does, and returns the target.
func (s *stack) publish(ctx context.Context, node csipb.NodeClient, v volume, pod *corev1.Pod) (string, error) {
	target := s.kubelet.TargetPath(string(pod.UID), v.pv.Name)
	volCtx := map[string]string{"csi.storage.k8s.io/pod.uid": string(pod.UID), "csi.storage.k8s.io/pod.name": pod.Name,
		"csi.storage.k8s.io/pod.namespace": pod.Namespace}
	for k, val := range v.ctx {
		volCtx[k] = val
	}
	_, err := node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: v.id, TargetPath: target, VolumeCapability: mountCapability(v.pv.Spec.MountOptions...), VolumeContext: volCtx,
	})
	return target, err
}

func (s *stack) unpublish(ctx context.Context, node csipb.NodeClient, v volume, target string) {
	s.t.Helper()
	if _, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: target}); err != nil {
		s.t.Fatalf("NodeUnpublishVolume %s: %v", target, err)
	}
}

// readThrough reads the object put by provision through a published target.
func (s *stack) readThrough(target string) {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(target, "dir", "hello.txt"))
	if err != nil || string(b) != "from S3" {
		s.t.Fatalf("read the object through %s: %q, %v", target, b, err)
	}
}

// attachments is the S3PAs of the stack's node.
func (s *stack) attachments(ctx context.Context) []s3csiv2.MountpointS3PodAttachment {
	list := &s3csiv2.MountpointS3PodAttachmentList{}
	if err := s.api.Client.List(ctx, list); err != nil {
		return nil
	}
	return list.Items
}

func (s *stack) mountpointPods(ctx context.Context) []corev1.Pod {
	list := &corev1.PodList{}
	if err := s.api.Client.List(ctx, list, client.InNamespace(mppod.DefaultNamespace)); err != nil {
		return nil
	}
	return list.Items
}

// TestTheMountPathRunsWithEveryServiceAContainer provisions a bucket through the csi-controller
// container, schedules a workload on it, and publishes it through the node-agent container as
// kubelet would: the pod-reconciler container makes the attachment and the Mountpoint Pod, whose
// mounter container serves the bucket at the workload's target. The events of every step are on
// the NATS container's stream. Deleting the workload cleans everything up, the mounter container
// exiting 0, and DeleteVolume removes the bucket.
func TestTheMountPathRunsWithEveryServiceAContainer(t *testing.T) {
	s := newStack(t)
	a := s.audit()
	s.podReconciler(false)
	s.janitor()
	_, controllerSocket := s.controller()
	s.nodeAgent()
	kubelet := s.startMountpointKubelet()
	controller := csipb.NewControllerClient(dialCSI(t, controllerSocket))
	node := csipb.NewNodeClient(dialCSI(t, filepath.Join(mppod.PluginDir(s.kubelet.Root), "csi.sock")))
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	v := s.provision(ctx, controller, "data")
	pod := s.schedule(ctx, "app", "data")
	start := time.Now()
	target, err := s.publish(ctx, node, v, pod)
	if err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	t.Logf("published %s %s after the pod was bound", target, time.Since(start).Round(time.Millisecond))
	s.readThrough(target)
	if err := os.WriteFile(filepath.Join(target, "written.txt"), []byte("from the workload"), 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	stored, err := os.ReadFile(filepath.Join(s.s3.Dir, v.bucket, "written.txt"))
	if err != nil || string(stored) != "from the workload" {
		t.Fatalf("the object the workload wrote: %q, %v", stored, err)
	}
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	mps := s.mountpointPods(ctx)
	if len(mps) != 1 {
		t.Fatalf("%d Mountpoint Pods, want 1", len(mps))
	}
	mp := mps[0]
	if _, ok := table.Lookup(s.kubelet.SourceDir(mp.Name)); !ok {
		t.Fatalf("the source of Mountpoint Pod %s is not in the host's mount table", mp.Name)
	}
	testenv.Eventually(t, 30*time.Second, "the stream holds the workload's scheduled, assigned and published events", func() bool {
		types := a.about(string(pod.UID))
		return has(types, events.TypeWorkloadScheduled) && has(types, events.TypeAttachmentAssigned) && has(types, events.TypeVolumePublished)
	})
	if !has(a.about(v.id), events.TypeVolumeCreated) {
		t.Errorf("no volume.created event for %s on the stream", v.id)
	}

	s.unpublish(ctx, node, v, target)
	if err := s.api.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "the attachment and the Mountpoint Pod are gone", func() bool {
		return len(s.attachments(ctx)) == 0 && len(s.mountpointPods(ctx)) == 0
	})
	if n := kubelet.containers(mp.UID); n != 1 {
		t.Errorf("Mountpoint Pod %s had %d containers, want 1", mp.Name, n)
	}
	table, err = mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := table.Lookup(s.kubelet.SourceDir(mp.Name)); ok {
		t.Errorf("the source of Mountpoint Pod %s is still mounted", mp.Name)
	}
	if !has(a.about(mp.Name), events.TypeMountpointNeedsUnmount) {
		t.Errorf("no needs-unmount event for %s on the stream", mp.Name)
	}

	if _, err := controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.id}); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	if _, err := s.s3.RootClient().HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(v.bucket)}); err == nil {
		t.Errorf("bucket %s still exists after DeleteVolume", v.bucket)
	}
}
