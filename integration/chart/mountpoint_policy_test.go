package chart

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/s3csi/s3csi/shared/fixture"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

// mountpointPolicy names the chart's ValidatingAdmissionPolicy and its binding.
const mountpointPolicy = "s3csi-mountpoint-pods"

// podReconcilerUser is the user the pod-reconciler's ServiceAccount authenticates as.
const podReconcilerUser = "system:serviceaccount:" + releaseNamespace + ":s3csi-pod-reconciler"

func TestMountpointAdmissionPolicyRendering(t *testing.T) {
	for _, tc := range []struct{ ci, namespace string }{{"default", "mount-s3"}, {"external-nats", "s3-mounts"}} {
		t.Run("the "+tc.ci+" rendering binds the policy to "+tc.namespace+" and exempts the pod-reconciler's ServiceAccount", func(t *testing.T) {
			objs := render(t, tc.ci)
			policy := find(objs, "ValidatingAdmissionPolicy", mountpointPolicy)
			binding := find(objs, "ValidatingAdmissionPolicyBinding", mountpointPolicy)
			if policy == nil || binding == nil {
				t.Fatalf("policy %v, binding %v: want both", policy != nil, binding != nil)
			}
			name, _, _ := unstructured.NestedString(binding.Object, "spec", "policyName")
			actions, _, _ := unstructured.NestedStringSlice(binding.Object, "spec", "validationActions")
			selector, _, _ := unstructured.NestedStringMap(binding.Object, "spec", "matchResources", "namespaceSelector", "matchLabels")
			if name != mountpointPolicy || !slices.Equal(actions, []string{"Deny"}) ||
				len(selector) != 1 || selector["kubernetes.io/metadata.name"] != tc.namespace {
				t.Errorf("binding names policy %q with actions %v for namespaces %v, want %s, [Deny], %s",
					name, actions, selector, mountpointPolicy, tc.namespace)
			}
			sa, _, _ := unstructured.NestedString(find(objs, "Deployment", "s3csi-pod-reconciler").Object,
				"spec", "template", "spec", "serviceAccountName")
			vars, _, _ := unstructured.NestedSlice(policy.Object, "spec", "variables")
			var exempt string
			for _, v := range vars {
				if m, _ := v.(map[string]any); m["name"] == "byPodReconciler" {
					exempt, _ = m["expression"].(string)
				}
			}
			if want := "'system:serviceaccount:" + releaseNamespace + ":" + sa + "'"; !strings.Contains(exempt, want) {
				t.Errorf("the policy exempts %q, want the user %s the pod-reconciler runs as", exempt, want)
			}
		})
	}
	t.Run("with the policy disabled neither it nor its binding is rendered", func(t *testing.T) {
		out, err := helmTemplate(t, "--set", "s3.endpointUrl=https://s3.example.com", "--set", "mountpointPod.admissionPolicy.enabled=false")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), mountpointPolicy) {
			t.Errorf("the rendering holds %s with mountpointPod.admissionPolicy.enabled=false", mountpointPolicy)
		}
	})
}

// outcome is what the API server answers one request of TestMountpointAdmissionPolicyOnARealAPIServer.
type outcome int

const (
	// allowed: the request succeeds.
	allowed outcome = iota
	// refused: the policy refuses it (403 naming the policy).
	refused
	// passed: the policy lets it through and it fails later, as a CONNECT to a pod does on an
	// API server without kubelets.
	passed
)

// TestMountpointAdmissionPolicyOnARealAPIServer applies the chart's policy, binding, namespace
// and Mountpoint Pod RBAC to a real kube-apiserver and checks, as distinct users, who may do
// what to the pods of the Mountpoint namespace and of another namespace.
func TestMountpointAdmissionPolicyOnARealAPIServer(t *testing.T) {
	api := testenv.StartAPIServer(t)
	applyPolicyAndRBAC(t, api, render(t, "default"))
	ctx := t.Context()
	const mp, other = mppod.DefaultNamespace, "workloads"

	admin := clientsetFor(t, api.Config)
	jane := impersonate(t, api, "jane")
	reconciler := impersonate(t, api, podReconcilerUser, serviceAccountGroups(releaseNamespace)...)
	janitor := impersonate(t, api, "system:serviceaccount:"+releaseNamespace+":s3csi-janitor", serviceAccountGroups(releaseNamespace)...)
	// Users the bootstrap RBAC policy of every API server grants what these components need.
	scheduler := impersonate(t, api, "system:kube-scheduler")
	collector := impersonate(t, api, "system:serviceaccount:kube-system:generic-garbage-collector", serviceAccountGroups("kube-system")...)

	waitUntilPolicyRefuses(t, jane, mountpointPodFixture("mp-probe"))

	r := podRequests{ctx: ctx}
	const newImage = `{"spec":{"containers":[{"name":"` + mppod.ContainerName + `","image":"attacker/mounter:1"}]}}`
	steps := []struct {
		name string
		do   func() error
		want outcome
		// inErr is a text of the refusal besides the policy's name.
		inErr string
	}{
		{"a user with RBAC on pods cannot create a Mountpoint Pod", r.create(jane, mountpointPodFixture("mp-jane")), refused,
			"only the s3csi pod-reconciler (" + podReconcilerUser + ") may create pods in mount-s3, not jane"},
		{"a cluster admin cannot create one either", r.create(admin, mountpointPodFixture("mp-admin")), refused, "may create pods in mount-s3"},
		{"the pod-reconciler creates a Mountpoint Pod", r.create(reconciler, mountpointPodFixture("mp-a")), allowed, ""},
		{"the pod-reconciler creates a second one", r.create(reconciler, mountpointPodFixture("mp-b")), allowed, ""},
		{"the pod-reconciler creates a third one", r.create(reconciler, mountpointPodFixture("mp-c")), allowed, ""},
		{"the pod-reconciler annotates it needs-unmount", r.patch(reconciler, mp, "mp-a", `{"metadata":{"annotations":{"`+mppod.AnnotationNeedsUnmount+`":"true"}}}`), allowed, ""},
		{"the janitor annotates it needs-unmount since now", r.patch(janitor, mp, "mp-a", `{"metadata":{"annotations":{"s3.csi.scality.com/needs-unmount-since":"2026-01-01T00:00:00Z"}}}`), allowed, ""},
		{"a user labels it", r.patch(jane, mp, "mp-a", `{"metadata":{"labels":{"team":"storage"}}}`), allowed, ""},
		{"a user cannot change its image", r.patch(jane, mp, "mp-a", newImage), refused, "jane may not change the spec of Mountpoint Pod mp-a"},
		{"a cluster admin cannot change its image either", r.patch(admin, mp, "mp-a", newImage), refused, "may not change the spec"},
		{"the pod-reconciler may change its spec", r.patch(reconciler, mp, "mp-a",
			`{"spec":{"containers":[{"name":"`+mppod.ContainerName+`","image":"s3csi/mounter:2"}]}}`), allowed, ""},
		{"the scheduler binds it to a node", func() error {
			return scheduler.CoreV1().Pods(mp).Bind(ctx, fixture.Binding(mountpointPodFixture("mp-a"), "node-1"), metav1.CreateOptions{})
		}, allowed, ""},
		{"a status update (kubelet's) goes through", r.markRunning(jane, mp, "mp-a"), allowed, ""},
		{"a cluster admin cannot exec into it", r.connect(admin, "POST", mp, "mp-a", "exec", "command", "sh", "stdout", "true"), refused, "pods/exec is refused in mount-s3 to everyone"},
		{"a user cannot exec into it", r.connect(jane, "POST", mp, "mp-a", "exec", "command", "sh", "stdout", "true"), refused, "pods/exec is refused"},
		{"a user cannot attach to it", r.connect(jane, "POST", mp, "mp-a", "attach", "stdout", "true"), refused, "pods/attach is refused"},
		{"a user cannot port-forward to it", r.connect(jane, "POST", mp, "mp-a", "portforward", "ports", "8080"), refused, "pods/portforward is refused"},
		{"a user cannot proxy to it", r.connect(jane, "GET", mp, "mp-a", "proxy"), refused, "pods/proxy is refused"},
		{"a user cannot add an ephemeral container to it", r.addDebugContainer(jane, mp, "mp-a"), refused, "pods/ephemeralcontainers is refused"},
		{"a user evicts it", func() error {
			return jane.PolicyV1().Evictions(mp).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "mp-a", Namespace: mp}})
		}, allowed, ""},
		{"a user deletes one", func() error { return jane.CoreV1().Pods(mp).Delete(ctx, "mp-b", metav1.DeleteOptions{}) }, allowed, ""},
		{"a foreground deletion leaves one for the garbage collector to finish", func() error {
			return admin.CoreV1().Pods(mp).Delete(ctx, "mp-c", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		}, allowed, ""},
		{"the garbage collector removes that finalizer", r.patch(collector, mp, "mp-c", `{"metadata":{"finalizers":null}}`), allowed, ""},
		{"a user creates a pod in another namespace", r.create(jane, fixture.Pod("app", fixture.InNamespace(other))), allowed, ""},
		{"a user changes its image", r.patch(jane, other, "app", `{"spec":{"containers":[{"name":"app","image":"app:2"}]}}`), allowed, ""},
		{"a user's exec into it passes the policy", r.connect(jane, "POST", other, "app", "exec", "command", "sh", "stdout", "true"), passed, ""},
		{"a user adds an ephemeral container to it", r.addDebugContainer(jane, other, "app"), allowed, ""},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			err := s.do()
			t.Logf("answer: %v", err)
			byPolicy := refusedByPolicy(err)
			switch {
			case s.want == allowed && err != nil:
				t.Errorf("refused: %v", err)
			case s.want == refused && !byPolicy:
				t.Errorf("want a refusal by %s, got %v", mountpointPolicy, err)
			case s.want == refused && !strings.Contains(err.Error(), s.inErr):
				t.Errorf("the refusal does not say %q: %v", s.inErr, err)
			case s.want == passed && (err == nil || byPolicy):
				t.Errorf("want a failure after the policy (no kubelet), got %v", err)
			}
		})
	}
	for _, name := range []string{"mp-b", "mp-c"} {
		if _, err := admin.CoreV1().Pods(mp).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Mountpoint Pod %s is still there after its deletion: %v", name, err)
		}
	}
}

// podRequests builds the requests of TestMountpointAdmissionPolicyOnARealAPIServer: each
// method returns the request to make later, as the client given.
type podRequests struct{ ctx context.Context }

func (r podRequests) create(c kubernetes.Interface, pod *corev1.Pod) func() error {
	return func() error {
		_, err := c.CoreV1().Pods(pod.Namespace).Create(r.ctx, pod, metav1.CreateOptions{})
		return err
	}
}

func (r podRequests) patch(c kubernetes.Interface, ns, name, body string) func() error {
	return func() error {
		_, err := c.CoreV1().Pods(ns).Patch(r.ctx, name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
}

// connect is a CONNECT request (exec, attach, portforward, proxy) with params as name, value
// pairs; without a kubelet it fails once past admission.
func (r podRequests) connect(c kubernetes.Interface, verb, ns, name, sub string, params ...string) func() error {
	return func() error {
		req := c.CoreV1().RESTClient().Verb(verb).Namespace(ns).Resource("pods").Name(name).SubResource(sub)
		for i := 0; i+1 < len(params); i += 2 {
			req = req.Param(params[i], params[i+1])
		}
		return req.Do(r.ctx).Error()
	}
}

// markRunning updates the pod's status as kubelet does.
func (r podRequests) markRunning(c kubernetes.Interface, ns, name string) func() error {
	return func() error {
		pod, err := c.CoreV1().Pods(ns).Get(r.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		_, err = c.CoreV1().Pods(ns).UpdateStatus(r.ctx, pod, metav1.UpdateOptions{})
		return err
	}
}

// addDebugContainer adds the ephemeral container `kubectl debug --profile=restricted` adds:
// Pod Security "restricted" admits it, so only the policy can refuse it.
func (r podRequests) addDebugContainer(c kubernetes.Interface, ns, name string) func() error {
	return func() error {
		pod, err := c.CoreV1().Pods(ns).Get(r.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debugger", Image: "busybox", Stdin: true, TTY: true,
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			},
		})
		_, err = c.CoreV1().Pods(ns).UpdateEphemeralContainers(r.ctx, name, pod, metav1.UpdateOptions{})
		return err
	}
}

// applyPolicyAndRBAC creates, from the rendering, the Mountpoint namespace, the policy and its
// binding, and the pod-reconciler's and janitor's Roles there; and a ClusterRole giving the user
// jane every verb on pods and their subresources, so that only the policy stands in her way.
func applyPolicyAndRBAC(t *testing.T, api *testenv.APIServer, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := t.Context()
	for _, ns := range []string{releaseNamespace, "workloads"} {
		if err := api.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range [][2]string{
		{"Namespace", mppod.DefaultNamespace},
		{"Role", "s3csi-pod-reconciler"}, {"RoleBinding", "s3csi-pod-reconciler"},
		{"Role", "s3csi-janitor"}, {"RoleBinding", "s3csi-janitor"},
		{"ValidatingAdmissionPolicy", mountpointPolicy}, {"ValidatingAdmissionPolicyBinding", mountpointPolicy},
	} {
		o := find(objs, ref[0], ref[1])
		if o == nil {
			t.Fatalf("the chart renders no %s %s", ref[0], ref[1])
		}
		if err := api.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", ref[0], ref[1], err)
		}
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-admin"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Verbs: []string{"*"},
			Resources: []string{"pods", "pods/exec", "pods/attach", "pods/portforward", "pods/proxy",
				"pods/ephemeralcontainers", "pods/status", "pods/binding", "pods/eviction"},
		}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "jane"}},
	}
	if err := api.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := api.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
}

// waitUntilPolicyRefuses polls, with a dry-run create, until the policy refuses pod: the API
// server loads a new policy asynchronously, about a second after its creation.
func waitUntilPolicyRefuses(t *testing.T, c kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = c.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if refusedByPolicy(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the policy %s still does not refuse a pod in %s created by someone else than the pod-reconciler; the last answer: %v",
				mountpointPolicy, pod.Namespace, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// refusedByPolicy says whether err is the policy's refusal.
func refusedByPolicy(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+mountpointPolicy+"'")
}

// mountpointPodFixture is a Mountpoint Pod, not yet scheduled, that passes the namespace's Pod
// Security "restricted" level.
func mountpointPodFixture(name string) *corev1.Pod {
	return fixture.MountpointPod(name, "")
}

// serviceAccountGroups are the groups of a ServiceAccount of namespace ns.
func serviceAccountGroups(ns string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}
}

// impersonate returns a client of the API server acting as user in groups.
func impersonate(t *testing.T, api *testenv.APIServer, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(api.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:authenticated"}, groups...)}
	return clientsetFor(t, cfg)
}

func clientsetFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
