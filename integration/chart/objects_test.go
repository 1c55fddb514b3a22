package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// render returns the objects `helm template` renders from the named ci values file.
func render(t *testing.T, ciName string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helmTemplate(t, "--values", filepath.Join(chartDir(t), "ci", ciName+"-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// decode returns the objects of rendered manifests.
func decode(t *testing.T, out []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("decode rendered manifests: %v", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// containers returns the containers of a workload object's pod template.
func containers(t *testing.T, o *unstructured.Unstructured) []map[string]any {
	t.Helper()
	list, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, c := range list {
		m, ok := c.(map[string]any)
		if !ok {
			t.Fatalf("%s %s has a container that is not an object: %v", o.GetKind(), o.GetName(), c)
		}
		out = append(out, m)
	}
	return out
}

// args returns a container's args; a non-string entry shows as its Go value.
func args(c map[string]any) []string {
	list, _ := c["args"].([]any)
	out := make([]string, 0, len(list))
	for _, a := range list {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

func envValue(c map[string]any, name string) (string, bool) {
	env, _ := c["env"].([]any)
	for _, e := range env {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			v, ok := m["value"].(string)
			return v, ok
		}
	}
	return "", false
}

func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatal("Chart.yaml has no appVersion")
	return ""
}

var workloadKinds = []string{"Deployment", "DaemonSet", "StatefulSet"}

// TestRenderedObjectsAreConsistent checks what golden files cannot: that the objects refer to
// one another correctly under every ci values file.
func TestRenderedObjectsAreConsistent(t *testing.T) {
	for _, ciName := range []string{"default", "clustered-nats", "external-nats", "servicemonitor"} {
		t.Run("the "+ciName+" rendering has unique objects, bound service accounts and existing roles", func(t *testing.T) {
			objs := render(t, ciName)
			seen := map[string]bool{}
			for _, o := range objs {
				key := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
				if o.GetName() == "" || seen[key] {
					t.Errorf("object %q is unnamed or rendered twice", key)
				}
				seen[key] = true
			}
			for _, o := range objs {
				switch {
				case slices.Contains(workloadKinds, o.GetKind()):
					sa, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName")
					if sa != "" && find(objs, "ServiceAccount", sa) == nil {
						t.Errorf("%s %s runs as ServiceAccount %s, which is not rendered", o.GetKind(), o.GetName(), sa)
					}
				case o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding":
					ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
					kind, _, _ := unstructured.NestedString(o.Object, "roleRef", "kind")
					if find(objs, kind, ref) == nil {
						t.Errorf("%s %s refers to %s %s, which is not rendered", o.GetKind(), o.GetName(), kind, ref)
					}
					subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
					for _, s := range subjects {
						m, _ := s.(map[string]any)
						name, _ := m["name"].(string)
						if find(objs, "ServiceAccount", name) == nil {
							t.Errorf("%s %s binds ServiceAccount %s, which is not rendered", o.GetKind(), o.GetName(), name)
						}
					}
					if ns := o.GetNamespace(); ns != "" && ns != releaseNamespace && find(objs, "Namespace", ns) == nil {
						t.Errorf("%s %s lives in namespace %s, which is not rendered", o.GetKind(), o.GetName(), ns)
					}
				}
			}
		})
	}
}

func TestDefaultImagesAreTheProjectImagesAtAppVersion(t *testing.T) {
	objs := render(t, "default")
	version := appVersion(t)
	var images []string
	for _, o := range objs {
		if slices.Contains(workloadKinds, o.GetKind()) {
			for _, c := range containers(t, o) {
				images = append(images, fmt.Sprint(c["image"]))
			}
		}
	}
	for _, want := range []string{"controller", "csi-provisioner", "pod-reconciler", "janitor", "node-agent", "nats"} {
		if !slices.Contains(images, "s3csi/"+want+":"+version) {
			t.Errorf("no container runs s3csi/%s:%s; images: %v", want, version, images)
		}
	}
	deployment := find(objs, "Deployment", "s3csi-pod-reconciler")
	if deployment == nil {
		t.Fatal("no pod-reconciler Deployment")
	}
	reconciler := containers(t, deployment)[0]
	want := "--mountpoint-image=s3csi/mounter:" + version
	if !slices.Contains(args(reconciler), want) {
		t.Errorf("the pod-reconciler is not given %s: %v", want, args(reconciler))
	}
	// The node-agent refuses a Mountpoint Pod of another image repository: it must be told the
	// image the pod-reconciler gives them.
	agent := find(objs, "DaemonSet", "s3csi-node-agent")
	if agent == nil {
		t.Fatal("no node-agent DaemonSet")
	}
	if got := args(containers(t, agent)[0]); !slices.Contains(got, want) {
		t.Errorf("the node-agent is not given %s: %v", want, got)
	}
}

func TestMountpointPodGracePeriodReachesThePodReconciler(t *testing.T) {
	deployment := find(render(t, "default"), "Deployment", "s3csi-pod-reconciler")
	if deployment == nil {
		t.Fatal("no pod-reconciler Deployment")
	}
	if got := args(containers(t, deployment)[0]); !slices.Contains(got, "--mountpoint-termination-grace-period=600s") {
		t.Errorf("the pod-reconciler is not given the Mountpoint Pods' 600 s grace period: %v", got)
	}
}

func TestNATSSettings(t *testing.T) {
	t.Run("the default rendering runs one NATS server and points every service at its Service", func(t *testing.T) {
		objs := render(t, "default")
		sts := find(objs, "StatefulSet", "s3csi-nats")
		if sts == nil {
			t.Fatal("no NATS StatefulSet")
		}
		if r, _, _ := unstructured.NestedFieldNoCopy(sts.Object, "spec", "replicas"); fmt.Sprint(r) != "1" {
			t.Errorf("NATS replicas = %v, want 1", r)
		}
		assertNATSURL(t, objs, "tls://s3csi-nats.s3csi-system.svc:4222")
		assertEnv(t, objs, "NATS_STREAM_REPLICAS", "1")
	})
	t.Run("three replicas form a cluster with a route to each server", func(t *testing.T) {
		objs := render(t, "clustered-nats")
		conf, _, _ := unstructured.NestedString(find(objs, "ConfigMap", "s3csi-nats").Object, "data", "nats.conf")
		for i := range 3 {
			route := "nats://s3csi-nats-" + strconv.Itoa(i) + ".s3csi-nats-headless.s3csi-system.svc:6222"
			if !strings.Contains(conf, route) {
				t.Errorf("nats.conf has no route %s:\n%s", route, conf)
			}
		}
		if find(objs, "PodDisruptionBudget", "s3csi-nats") == nil {
			t.Error("a clustered NATS has no PodDisruptionBudget")
		}
		assertEnv(t, objs, "NATS_STREAM_REPLICAS", "3")
	})
	t.Run("an external URL deploys no NATS and is handed to every service", func(t *testing.T) {
		objs := render(t, "external-nats")
		for _, o := range objs {
			if strings.HasPrefix(o.GetName(), "s3csi-nats") {
				t.Errorf("%s %s rendered with an external NATS", o.GetKind(), o.GetName())
			}
		}
		assertNATSURL(t, objs, "tls://nats-a.messaging:4222,tls://nats-b.messaging:4222")
		assertEnv(t, objs, "NATS_STREAM_REPLICAS", "3") // nats.streamReplicas of the values file
	})
}

func assertNATSURL(t *testing.T, objs []*unstructured.Unstructured, want string) {
	t.Helper()
	assertEnv(t, objs, "NATS_URL", want)
}

// assertEnv checks that the first container of every service has env set to want.
func assertEnv(t *testing.T, objs []*unstructured.Unstructured, env, want string) {
	t.Helper()
	for _, name := range []string{"s3csi-controller", "s3csi-pod-reconciler", "s3csi-janitor", "s3csi-node-agent"} {
		kind := "Deployment"
		if name == "s3csi-node-agent" {
			kind = "DaemonSet"
		}
		o := find(objs, kind, name)
		if o == nil {
			t.Errorf("no %s %s", kind, name)
			continue
		}
		if got, _ := envValue(containers(t, o)[0], env); got != want {
			t.Errorf("%s has %s %q, want %q", name, env, got, want)
		}
	}
}
