// Package status reads, from the API server, what s3csi holds on each node: the Mountpoint
// Pods, the MountpointS3PodAttachments that record them, the workloads they serve, and how
// healthy each mount looks from there.
package status

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/mppod"
)

// Labels of the Mountpoint Pods the pod-reconciler creates.
const (
	labelManagedBy      = "app.kubernetes.io/managed-by"
	labelComponent      = "app.kubernetes.io/component"
	managedByValue      = "s3csi-pod-reconciler"
	componentMountpoint = "mountpoint"
)

// Health of a mount, as the API server shows it.
const (
	HealthOK                = "ok"
	HealthMounting          = "mounting"
	HealthWorkloadGone      = "workload-gone"
	HealthWorkloadEnded     = "workload-ended"
	HealthMountpointMissing = "mountpoint-pod-missing"
	HealthMountpointPending = "mountpoint-pod-pending"
	HealthMountpointFailing = "mountpoint-pod-failing"
	HealthUnmounting        = "unmounting"
	HealthOrphan            = "orphan-mountpoint-pod"
	HealthIdle              = "idle"
)

// Node is what s3csi holds on one node.
type Node struct {
	Name        string       `json:"name"`
	Mountpoints []Mountpoint `json:"mountpoints"`
}

// Mountpoint is one Mountpoint Pod (or an attachment's entry for a missing one).
type Mountpoint struct {
	// Pod is the Mountpoint Pod's name; Phase, Ready, Restarts and Problem its state ("" Phase
	// when the pod does not exist).
	Pod      string `json:"pod"`
	Phase    string `json:"phase,omitempty"`
	Ready    bool   `json:"ready"`
	Restarts int32  `json:"restarts"`
	Problem  string `json:"problem,omitempty"`
	// NeedsUnmount is true once the pod was asked to unmount (no workload left).
	NeedsUnmount bool `json:"needsUnmount,omitempty"`
	// Attachment, PV and VolumeID come from the MountpointS3PodAttachment that records the pod.
	Attachment string     `json:"attachment,omitempty"`
	PV         string     `json:"pv,omitempty"`
	VolumeID   string     `json:"volumeID,omitempty"`
	Workloads  []Workload `json:"workloads"`
	// Health sums the Mountpoint Pod up; each workload has its own.
	Health string `json:"health"`
}

// Workload is one workload pod recorded in an attachment.
type Workload struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Phase     string `json:"phase,omitempty"`
	Health    string `json:"health"`
}

// Options select what Collect reads.
type Options struct {
	// Node restricts the report to one node ("" for all).
	Node string
	// MountpointNamespace is where Mountpoint Pods run (default mount-s3).
	MountpointNamespace string
}

// Collect reads the attachments, Mountpoint Pods and workloads, sorted by node and name.
func Collect(ctx context.Context, c client.Reader, o Options) ([]Node, error) {
	if o.MountpointNamespace == "" {
		o.MountpointNamespace = mppod.DefaultNamespace
	}
	var s3pas s3csiv2.MountpointS3PodAttachmentList
	if err := c.List(ctx, &s3pas); err != nil {
		return nil, fmt.Errorf("list MountpointS3PodAttachments: %w", err)
	}
	var mpPods corev1.PodList
	if err := c.List(ctx, &mpPods, client.InNamespace(o.MountpointNamespace),
		client.MatchingLabels{labelManagedBy: managedByValue, labelComponent: componentMountpoint}); err != nil {
		return nil, fmt.Errorf("list Mountpoint Pods in %s: %w", o.MountpointNamespace, err)
	}
	mps := map[string]*corev1.Pod{}
	for i := range mpPods.Items {
		mps[mpPods.Items[i].Name] = &mpPods.Items[i]
	}
	nodes := map[string]*Node{}
	node := func(name string) *Node {
		n, ok := nodes[name]
		if !ok {
			n = &Node{Name: name}
			nodes[name] = n
		}
		return n
	}
	workloads := map[string]map[string]*corev1.Pod{} // node -> UID -> pod
	recorded := map[string]bool{}
	for i := range s3pas.Items {
		a := &s3pas.Items[i]
		if o.Node != "" && a.Spec.NodeName != o.Node {
			continue
		}
		pods, err := workloadsOn(ctx, c, workloads, a.Spec.NodeName)
		if err != nil {
			return nil, err
		}
		for mpName, attached := range a.Spec.MountpointS3PodAttachments {
			recorded[mpName] = true
			m := mountpoint(mpName, mps[mpName])
			m.Attachment, m.PV, m.VolumeID = a.Name, a.Spec.PersistentVolumeName, a.Spec.VolumeID
			for _, w := range attached {
				m.Workloads = append(m.Workloads, workload(w.WorkloadPodUID, pods[w.WorkloadPodUID], m))
			}
			sort.Slice(m.Workloads, func(i, j int) bool { return m.Workloads[i].UID < m.Workloads[j].UID })
			if len(m.Workloads) == 0 && m.Health == HealthOK {
				m.Health = HealthIdle
			}
			n := node(a.Spec.NodeName)
			n.Mountpoints = append(n.Mountpoints, m)
		}
	}
	for name, p := range mps {
		nodeName := podNode(p)
		if recorded[name] || (o.Node != "" && nodeName != o.Node) {
			continue
		}
		m := mountpoint(name, p)
		if !m.NeedsUnmount {
			m.Health = HealthOrphan
		}
		m.Workloads = []Workload{}
		n := node(nodeName)
		n.Mountpoints = append(n.Mountpoints, m)
	}
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		sort.Slice(n.Mountpoints, func(i, j int) bool {
			a, b := n.Mountpoints[i], n.Mountpoints[j]
			if a.PV != b.PV {
				return a.PV < b.PV
			}
			return a.Pod < b.Pod
		})
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// workloadsOn lists the pods of node once, by UID.
func workloadsOn(ctx context.Context, c client.Reader, cache map[string]map[string]*corev1.Pod, node string) (map[string]*corev1.Pod, error) {
	if pods, ok := cache[node]; ok {
		return pods, nil
	}
	var list corev1.PodList
	if err := c.List(ctx, &list, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", node)}); err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", node, err)
	}
	pods := make(map[string]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[string(list.Items[i].UID)] = &list.Items[i]
	}
	cache[node] = pods
	return pods, nil
}

// mountpoint is the state of the Mountpoint Pod name; p is nil when it does not exist.
func mountpoint(name string, p *corev1.Pod) Mountpoint {
	m := Mountpoint{Pod: name, Workloads: []Workload{}}
	if p == nil {
		m.Health = HealthMountpointMissing
		return m
	}
	m.Phase = string(p.Status.Phase)
	_, m.NeedsUnmount = p.Annotations[mppod.AnnotationNeedsUnmount]
	for _, c := range p.Status.ContainerStatuses {
		m.Restarts += c.RestartCount
		if w := c.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
			m.Problem = w.Reason
		}
		if t := c.State.Terminated; t != nil && t.ExitCode != 0 {
			m.Problem = fmt.Sprintf("%s (exit %d)", t.Reason, t.ExitCode)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			m.Ready = c.Status == corev1.ConditionTrue
		}
	}
	switch {
	case m.NeedsUnmount:
		m.Health = HealthUnmounting
	case p.Status.Phase == corev1.PodFailed || m.Problem != "":
		m.Health = HealthMountpointFailing
	case p.Status.Phase == corev1.PodRunning && m.Ready:
		m.Health = HealthOK
	default:
		m.Health = HealthMountpointPending
	}
	return m
}

// workload is the state of the workload uid (p nil when no pod of that UID runs on the node).
func workload(uid string, p *corev1.Pod, m Mountpoint) Workload {
	w := Workload{UID: uid}
	if p == nil {
		w.Health = HealthWorkloadGone
		return w
	}
	w.Namespace, w.Name, w.Phase = p.Namespace, p.Name, string(p.Status.Phase)
	switch {
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		w.Health = HealthWorkloadEnded
	case m.Health != HealthOK:
		w.Health = m.Health
	case p.Status.Phase == corev1.PodRunning:
		w.Health = HealthOK
	default:
		w.Health = HealthMounting // kubelet waits for NodePublishVolume before it starts containers
	}
	return w
}

// podNode is the node of a Mountpoint Pod: where it was scheduled, else its node affinity.
func podNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return ""
}
