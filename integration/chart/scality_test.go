package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// scalityValuesFile is a values file of the Scality CSI Driver for S3 v2.2 chart.
const scalityValuesFile = "testdata/scality-2.2-values.yaml"

// scalityNames is every value name of the Scality CSI Driver for S3 v2.2 chart's configuration
// reference (docs/concepts-and-reference/helm-chart-configuration-reference.md), its tls.*
// names aside (s3ca_test.go), plus image.containerRegistry, which its templates read.
var scalityNames = []string{
	"nameOverride", "fullnameOverride", "imagePullSecrets",
	"image.containerRegistry", "image.repository", "image.pullPolicy", "image.tag",
	"s3.endpointUrl", "s3.region", "node.s3EndpointUrl", "node.s3Region",
	"s3CredentialSecret.name", "s3CredentialSecret.accessKeyId", "s3CredentialSecret.secretAccessKey",
	"s3CredentialSecret.sessionToken",
	"node.kubeletPath", "node.logLevel",
	"node.seLinuxOptions.user", "node.seLinuxOptions.type", "node.seLinuxOptions.role", "node.seLinuxOptions.level",
	"node.serviceAccount.create", "node.serviceAccount.name", "node.nodeSelector",
	"node.resources.requests.cpu", "node.resources.requests.memory", "node.resources.limits.memory",
	"node.tolerateAllTaints", "node.defaultTolerations", "node.tolerations", "node.podInfoOnMountCompat.enable",
	"sidecars.nodeDriverRegistrar.image.repository", "sidecars.nodeDriverRegistrar.image.tag",
	"sidecars.nodeDriverRegistrar.image.pullPolicy", "sidecars.nodeDriverRegistrar.resources",
	"sidecars.livenessProbe.image.repository", "sidecars.livenessProbe.image.tag",
	"sidecars.livenessProbe.image.pullPolicy", "sidecars.livenessProbe.resources",
	"sidecars.csiProvisioner.image.repository", "sidecars.csiProvisioner.image.tag",
	"sidecars.csiProvisioner.image.pullPolicy", "sidecars.csiProvisioner.resources",
	"initContainer.installMountpoint.resources",
	"controller.serviceAccount.create", "controller.serviceAccount.name",
	"mountpointPod.namespace", "mountpointPod.priorityClassName", "mountpointPod.preemptingPriorityClassName",
	"mountpointPod.headroomPriorityClassName", "mountpointPod.headroomImage.repository",
	"mountpointPod.headroomImage.tag", "mountpointPod.headroomImage.pullPolicy",
	"cleanupCRDOnUninstall",
}

// scalityMapped are the Scality names s3csi moves onto its own, and the warning NOTES.txt prints.
var scalityMapped = map[string]string{
	"node.s3EndpointUrl":                "node.s3EndpointUrl is Scality's name; s3csi uses s3.endpointUrl",
	"node.s3Region":                     "node.s3Region is Scality's name; s3csi uses s3.region",
	"image.containerRegistry":           "image.containerRegistry is Scality's name; s3csi uses image.registry",
	"sidecars.csiProvisioner.resources": "sidecars.csiProvisioner.resources is Scality's name; s3csi uses controller.provisioner.resources",
}

// scalityRefused are the Scality names s3csi cannot take as given: a value an operator of that chart
// gives each, and what the refusal says.
var scalityRefused = []struct {
	name, values string
	wantInErr    []string
}{
	{"nameOverride", "nameOverride: s3\n", []string{"nameOverride: object names are fixed"}},
	{"fullnameOverride", "fullnameOverride: ring-s3\n", []string{"fullnameOverride: object names are fixed"}},
	{"image.repository", "image:\n  repository: ghcr.io/scality/mountpoint-s3-csi-driver\n",
		[]string{"image.repository: s3csi runs seven images", "image.registry", "image.repositories.<image>"}},
	{"node.serviceAccount.create", "node:\n  serviceAccount:\n    create: false\n",
		[]string{"node.serviceAccount.create: s3csi always creates", "s3csi-node-agent"}},
	{"node.serviceAccount.name", "node:\n  serviceAccount:\n    name: s3-csi-driver-sa\n",
		[]string{"node.serviceAccount.name: the node-agent's ServiceAccount is s3csi-node-agent"}},
	{"controller.serviceAccount.create", "controller:\n  serviceAccount:\n    create: false\n",
		[]string{"controller.serviceAccount.create: s3csi always creates", "s3csi-controller"}},
	{"controller.serviceAccount.name", "controller:\n  serviceAccount:\n    name: s3-csi-driver-controller-sa\n",
		[]string{"controller.serviceAccount.name: the csi-controller's ServiceAccount is s3csi-controller"}},
	{"sidecars.nodeDriverRegistrar", "sidecars:\n  nodeDriverRegistrar:\n    image:\n      repository: ghcr.io/scality/mountpoint-s3-csi-driver/csi-node-driver-registrar\n      tag: v2.14.0\n      pullPolicy: IfNotPresent\n    resources:\n      limits:\n        memory: 64Mi\n",
		[]string{
			"sidecars.nodeDriverRegistrar.image.repository: s3csi has no node-driver-registrar",
			"sidecars.nodeDriverRegistrar.image.tag: s3csi has no node-driver-registrar",
			"sidecars.nodeDriverRegistrar.image.pullPolicy: s3csi has no node-driver-registrar",
			"sidecars.nodeDriverRegistrar.resources: s3csi has no node-driver-registrar",
		}},
	{"sidecars.livenessProbe", "sidecars:\n  livenessProbe:\n    image:\n      repository: ghcr.io/scality/mountpoint-s3-csi-driver/livenessprobe\n      tag: v2.16.0\n      pullPolicy: IfNotPresent\n    resources:\n      limits:\n        memory: 64Mi\n",
		[]string{
			"sidecars.livenessProbe.image.repository: s3csi has no livenessprobe",
			"sidecars.livenessProbe.image.tag: s3csi has no livenessprobe",
			"sidecars.livenessProbe.image.pullPolicy: s3csi has no livenessprobe",
			"sidecars.livenessProbe.resources: s3csi has no livenessprobe",
		}},
	{"sidecars.csiProvisioner.image", "sidecars:\n  csiProvisioner:\n    image:\n      repository: ghcr.io/scality/mountpoint-s3-csi-driver/csi-provisioner\n      tag: v5.3.0\n      pullPolicy: IfNotPresent\n",
		[]string{
			"sidecars.csiProvisioner.image.repository: s3csi builds its own csi-provisioner image", "image.repositories.csiProvisioner",
			"sidecars.csiProvisioner.image.tag: s3csi builds its own csi-provisioner image", "image.tags.csiProvisioner",
			"sidecars.csiProvisioner.image.pullPolicy: s3csi pulls every image with image.pullPolicy",
		}},
	{"initContainer.installMountpoint.resources", "initContainer:\n  installMountpoint:\n    resources:\n      requests:\n        cpu: 10m\n",
		[]string{"initContainer.installMountpoint.resources: s3csi has no init container"}},
	{"mountpointPod headroom", "mountpointPod:\n  preemptingPriorityClassName: mount-s3-preempting\n  headroomPriorityClassName: mount-s3-headroom\n  headroomImage:\n    repository: ghcr.io/scality/mountpoint-s3-csi-driver/pause\n    tag: \"3.10\"\n    pullPolicy: IfNotPresent\n",
		[]string{
			"mountpointPod.preemptingPriorityClassName: s3csi reserves no headroom", "mountpointPod.priorityClassName",
			"mountpointPod.headroomPriorityClassName: s3csi reserves no headroom",
			"mountpointPod.headroomImage.repository: s3csi runs no headroom pods",
			"mountpointPod.headroomImage.tag: s3csi runs no headroom pods",
			"mountpointPod.headroomImage.pullPolicy: s3csi runs no headroom pods",
		}},
	{"cleanupCRDOnUninstall", "cleanupCRDOnUninstall: true\n",
		[]string{"cleanupCRDOnUninstall: s3csi's uninstall never deletes attachments or Mountpoint Pods"}},
}

// renderWithNotes renders the chart as helmTemplate does and also returns NOTES.txt as `helm
// install` prints it. `helm template` renders NOTES.txt but never prints it, so a copy of the
// chart carries one more template wrapping it into a ConfigMap.
func renderWithNotes(t *testing.T, args ...string) ([]*unstructured.Unstructured, string, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "s3csi")
	if err := os.CopyFS(dir, os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	const notesCM = "notes-of-the-test"
	wrap := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + notesCM +
		"\ndata:\n  notes: {{ include \"s3csi/templates/NOTES.txt\" . | toJson }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes-of-the-test.yaml"), []byte(wrap), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := helmTemplateChart(t, dir, args...)
	if err != nil {
		return nil, "", err
	}
	var objs []*unstructured.Unstructured
	notes := ""
	for _, o := range decode(t, out) {
		if o.GetKind() == "ConfigMap" && o.GetName() == notesCM {
			notes, _, _ = unstructured.NestedString(o.Object, "data", "notes")
			continue
		}
		objs = append(objs, o)
	}
	if notes == "" {
		t.Fatal("the rendering holds no NOTES.txt")
	}
	return objs, notes, nil
}

// valuesFile writes values to a file of the test's temporary directory and returns its path.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// podSpecs returns the pod spec of every workload object.
func podSpecs(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	specs := map[string]map[string]any{}
	for _, o := range objs {
		if !slices.Contains(workloadKinds, o.GetKind()) {
			continue
		}
		spec, _, err := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		if err != nil {
			t.Fatal(err)
		}
		specs[o.GetKind()+" "+o.GetName()] = spec
	}
	if len(specs) < 5 {
		t.Fatalf("want at least 5 workloads, found %d", len(specs))
	}
	return specs
}

// container returns the named container of a workload object, failing the test when absent.
func container(t *testing.T, objs []*unstructured.Unstructured, kind, name, containerName string) map[string]any {
	t.Helper()
	o := find(objs, kind, name)
	if o == nil {
		t.Fatalf("no %s %s", kind, name)
	}
	for _, c := range containers(t, o) {
		if c["name"] == containerName {
			return c
		}
	}
	t.Fatalf("%s %s has no container %s", kind, name, containerName)
	return nil
}

// TestTheScalityValuesFileUsesEveryReferenceName keeps the test data honest: a name of the
// Scality chart's reference missing from it would go untested.
func TestTheScalityValuesFileUsesEveryReferenceName(t *testing.T) {
	b, err := os.ReadFile(scalityValuesFile)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	for _, name := range scalityNames {
		var cur any = values
		for key := range strings.SplitSeq(name, ".") {
			m, _ := cur.(map[string]any)
			var ok bool
			if cur, ok = m[key]; !ok {
				t.Errorf("%s does not set %s", scalityValuesFile, name)
				break
			}
		}
	}
}

// TestAScalityValuesFileInstalls: an operator of the Scality CSI Driver for S3 v2.2 reuses their
// values file. It renders; each Scality name s3csi calls otherwise lands on s3csi's value and
// NOTES.txt says to rename it; the names both charts share keep their meaning.
func TestAScalityValuesFileInstalls(t *testing.T) {
	objs, notes, err := renderWithNotes(t, "--values", scalityValuesFile)
	if err != nil {
		t.Fatalf("the Scality values file does not render: %v", err)
	}

	const endpoint, region = "https://s3.ring.example.com:8443", "eu-west-1"
	t.Run("node.s3EndpointUrl and node.s3Region reach the csi-controller and the node-agent", func(t *testing.T) {
		for _, want := range []struct{ kind, name, container, arg string }{
			{"Deployment", "s3csi-controller", "csi-controller", "--s3-endpoint=" + endpoint},
			{"Deployment", "s3csi-controller", "csi-controller", "--s3-region=" + region},
			{"DaemonSet", "s3csi-node-agent", "node-agent", "--s3-endpoint-url=" + endpoint},
			{"DaemonSet", "s3csi-node-agent", "node-agent", "--s3-region=" + region},
		} {
			if got := args(container(t, objs, want.kind, want.name, want.container)); !slices.Contains(got, want.arg) {
				t.Errorf("%s %s: want %s in %v", want.kind, want.name, want.arg, got)
			}
		}
		if !strings.Contains(notes, "S3 endpoint "+endpoint) {
			t.Errorf("NOTES.txt does not name the endpoint %s:\n%s", endpoint, notes)
		}
	})

	t.Run("image.containerRegistry prefixes every image, image.tag and image.pullPolicy apply to each", func(t *testing.T) {
		for name, spec := range podSpecs(t, objs) {
			list, _ := spec["containers"].([]any)
			for _, c := range list {
				c, _ := c.(map[string]any)
				image, _ := c["image"].(string)
				if !strings.HasPrefix(image, "registry.example.com/storage/s3csi/") || !strings.HasSuffix(image, ":0.1.0") {
					t.Errorf("%s: container %v runs %s, want registry.example.com/storage/s3csi/<image>:0.1.0", name, c["name"], image)
				}
				if c["imagePullPolicy"] != "Always" {
					t.Errorf("%s: container %v pulls %v, want Always", name, c["name"], c["imagePullPolicy"])
				}
			}
		}
	})

	t.Run("sidecars.csiProvisioner.resources are the csi-provisioner's", func(t *testing.T) {
		got := container(t, objs, "Deployment", "s3csi-controller", "csi-provisioner")["resources"]
		want := map[string]any{
			"requests": map[string]any{"cpu": "15m", "memory": "48Mi"},
			"limits":   map[string]any{"memory": "192Mi"},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("csi-provisioner resources %v, want %v", got, want)
		}
	})

	t.Run("imagePullSecrets given as names reach every charted pod", func(t *testing.T) {
		want := []any{map[string]any{"name": "ring-registry"}, map[string]any{"name": "mirror-registry"}}
		for name, spec := range podSpecs(t, objs) {
			if !reflect.DeepEqual(spec["imagePullSecrets"], want) {
				t.Errorf("%s: imagePullSecrets %v, want %v", name, spec["imagePullSecrets"], want)
			}
		}
	})

	t.Run("the shared names keep their meaning", func(t *testing.T) {
		agent := container(t, objs, "DaemonSet", "s3csi-node-agent", "node-agent")
		if got := args(agent); !slices.Contains(got, "--kubelet-dir=/var/lib/k0s/kubelet") || !slices.Contains(got, "--log-level=2") {
			t.Errorf("node-agent args %v lack node.kubeletPath or node.logLevel", got)
		}
		se, _, _ := unstructured.NestedStringMap(agent, "securityContext", "seLinuxOptions")
		if want := map[string]string{"user": "system_u", "type": "super_t", "role": "system_r", "level": "s0"}; !reflect.DeepEqual(se, want) {
			t.Errorf("node-agent seLinuxOptions %v, want %v", se, want)
		}
		spec := podSpecs(t, objs)["DaemonSet s3csi-node-agent"]
		if sel, _ := spec["nodeSelector"].(map[string]any); sel["storage.example.com/s3"] != "true" {
			t.Errorf("node-agent nodeSelector %v lacks node.nodeSelector", spec["nodeSelector"])
		}
		if tol := spec["tolerations"]; !strings.Contains(toJSON(t, tol), "storage.example.com/dedicated") {
			t.Errorf("node-agent tolerations %v lack node.tolerations", tol)
		}
		if env := toJSON(t, agent["env"]); !strings.Contains(env, `{"key":"ring_secret_key","name":"ring-keys"`) {
			t.Errorf("node-agent env does not read Secret ring-keys's key ring_secret_key:\n%s", env)
		}
	})

	t.Run("NOTES.txt names each Scality name and s3csi's", func(t *testing.T) {
		for name, warning := range scalityMapped {
			if !strings.Contains(notes, warning) {
				t.Errorf("NOTES.txt does not say %q for %s:\n%s", warning, name, notes)
			}
		}
	})
}

// toJSON renders v for a substring check.
func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestScalityValuesWithoutAnS3csiCounterpartAreRefused: each Scality name with no s3csi counterpart,
// given a value, fails the rendering with the reason and the replacement when there is one.
// All of them are listed at once, so one attempt shows every line to change.
func TestScalityValuesWithoutAnS3csiCounterpartAreRefused(t *testing.T) {
	var all []string
	for _, tc := range scalityRefused {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			_, _, err := renderWithNotes(t, "--values", scalityValuesFile, "--values", valuesFile(t, tc.values))
			if err == nil {
				t.Fatal("the values rendered")
			}
			for _, want := range tc.wantInErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q:\n%v", want, err)
				}
			}
		})
		all = append(all, tc.wantInErr...)
	}
	t.Run("every refusal is listed in one error", func(t *testing.T) {
		files := []string{"--values", scalityValuesFile}
		for _, tc := range scalityRefused {
			files = append(files, "--values", valuesFile(t, tc.values))
		}
		_, _, err := renderWithNotes(t, files...)
		if err == nil {
			t.Fatal("the values rendered")
		}
		for _, want := range all {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q:\n%v", want, err)
			}
		}
	})
}

// TestAScalityNameAndOursWithDifferentValuesAreRefused: which of two values for one setting
// the operator meant would be a guess; the same value under both names is fine.
func TestAScalityNameAndOursWithDifferentValuesAreRefused(t *testing.T) {
	cases := []struct {
		name, values string
		wantInErr    []string // nil: renders
	}{
		{"two endpoints are refused",
			"s3:\n  endpointUrl: https://s3.example.com\nnode:\n  s3EndpointUrl: https://s3.ring.example.com\n",
			[]string{"node.s3EndpointUrl", "s3.endpointUrl", "https://s3.ring.example.com", "https://s3.example.com", "keep only s3.endpointUrl"}},
		{"the same endpoint under both names renders",
			"s3:\n  endpointUrl: https://s3.example.com\nnode:\n  s3EndpointUrl: https://s3.example.com\n", nil},
		{"two regions are refused",
			"s3:\n  endpointUrl: https://s3.example.com\n  region: eu-west-3\nnode:\n  s3Region: eu-west-1\n",
			[]string{"node.s3Region", "s3.region", "keep only s3.region"}},
		{"two registries are refused",
			"s3:\n  endpointUrl: https://s3.example.com\nimage:\n  registry: a.example.com\n  containerRegistry: b.example.com/\n",
			[]string{"image.containerRegistry", "image.registry", "keep only image.registry"}},
		{"two sets of provisioner resources are refused",
			"s3:\n  endpointUrl: https://s3.example.com\ncontroller:\n  provisioner:\n    resources:\n      limits:\n        memory: 1Gi\nsidecars:\n  csiProvisioner:\n    resources:\n      limits:\n        memory: 2Gi\n",
			[]string{"sidecars.csiProvisioner.resources", "controller.provisioner.resources", "keep only controller.provisioner.resources"}},
		{"a Scality region with s3csi's default region renders",
			"s3:\n  endpointUrl: https://s3.example.com\nnode:\n  s3Region: eu-west-1\n", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := renderWithNotes(t, "--values", valuesFile(t, tc.values))
			if tc.wantInErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("the values rendered")
			}
			for _, want := range tc.wantInErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestImagePullSecretsTakeNamesAndObjects: Scality's and AWS's charts take names, s3csi took
// {name: ...} objects; a list may mix both.
func TestImagePullSecretsTakeNamesAndObjects(t *testing.T) {
	objs, _, err := renderWithNotes(t, "--values", valuesFile(t,
		"s3:\n  endpointUrl: https://s3.example.com\nimagePullSecrets:\n  - by-name\n  - name: by-object\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []any{map[string]any{"name": "by-name"}, map[string]any{"name": "by-object"}}
	for name, spec := range podSpecs(t, objs) {
		if !reflect.DeepEqual(spec["imagePullSecrets"], want) {
			t.Errorf("%s: imagePullSecrets %v, want %v", name, spec["imagePullSecrets"], want)
		}
	}
}

// TestS3csiValuesPrintNoScalityWarning: NOTES.txt speaks of Scality's names only to those who
// used them.
func TestS3csiValuesPrintNoScalityWarning(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir(t), "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci values files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			_, notes, err := renderWithNotes(t, "--values", file)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(notes, "Scality") {
				t.Errorf("NOTES.txt speaks of Scality's names:\n%s", notes)
			}
		})
	}
}
