package cleanup

import (
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/mppod"
)

// Fixture builders for the objects the janitor reads: attachments, Mountpoint Pods, workload
// pods and Nodes. Each takes modifiers so a test states only what matters to it.

func attachment(name, node string, mods ...func(*s3csiv2.MountpointS3PodAttachment)) *s3csiv2.MountpointS3PodAttachment {
	a := &s3csiv2.MountpointS3PodAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: s3csiv2.MountpointS3PodAttachmentSpec{
			NodeName: node, PersistentVolumeName: "pv-" + name, VolumeID: "bucket-" + name,
			MountpointS3PodAttachments: map[string][]s3csiv2.WorkloadAttachment{},
		},
	}
	for _, m := range mods {
		m(a)
	}
	return a
}

// withWorkload records a workload of a Mountpoint Pod, attached at the given time.
func withWorkload(mountpointPod, uid string, at time.Time) func(*s3csiv2.MountpointS3PodAttachment) {
	return func(a *s3csiv2.MountpointS3PodAttachment) {
		a.Spec.MountpointS3PodAttachments[mountpointPod] = append(a.Spec.MountpointS3PodAttachments[mountpointPod],
			s3csiv2.WorkloadAttachment{WorkloadPodUID: uid, AttachmentTime: metav1.NewTime(at)})
	}
}

func mountpointPod(name, node string, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: mppod.DefaultNamespace,
			Labels: map[string]string{s3csiv2.LabelDriverVersion: "v0.0.0-test"},
		},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "mountpoint", Image: "s3csi-mounter:test"}},
		},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

// scheduledByAffinity leaves spec.nodeName empty and pins the pod with node affinity, as the
// pod-reconciler does before the scheduler binds it.
func scheduledByAffinity(p *corev1.Pod) {
	node := p.Spec.NodeName
	p.Spec.NodeName = ""
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}}
}

func withoutDriverLabel(p *corev1.Pod) { p.Labels = nil }

func workloadPod(namespace, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "app:test"}},
		},
	}
}

func nodeObject(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// testClock is a real clock that a test can move forward, so that objects the API server just
// stamped with creationTimestamp "now" can be made old.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

var nameSeq atomic.Int64

// uniqueName returns prefix with a sequence number: tests share one API server.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, nameSeq.Add(1))
}

// longAgo is an attachment time well past any staleness threshold of the tests.
var longAgo = time.Now().Add(-time.Hour)
