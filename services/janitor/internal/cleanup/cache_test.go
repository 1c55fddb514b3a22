package cleanup

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestMountpointPodNode(t *testing.T) {
	hostnameAffinity := mountpointPod("mp", "")
	hostnameAffinity.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"host-a"}}},
		}}},
	}}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{name: "a scheduled pod runs on its spec.nodeName", pod: mountpointPod("mp", "node-a"), want: "node-a"},
		{name: "an unscheduled pod is meant for the node its affinity names", pod: mountpointPod("mp", "node-b", scheduledByAffinity), want: "node-b"},
		{name: "a pod without node or affinity has no known node", pod: mountpointPod("mp", ""), want: ""},
		{name: "a hostname label is not taken for the node name", pod: hostnameAffinity, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mountpointPodNode(tt.pod); got != tt.want {
				t.Errorf("mountpointPodNode() = %q, want %q", got, tt.want)
			}
		})
	}
}
