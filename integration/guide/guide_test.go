package guide

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

func TestBlocks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		markdown string
		want     []Block
		wantErr  string
	}{{
		name:     "a yaml block whose first line is the marker is an example",
		markdown: "# Title\n\n```yaml\n# guide: static-pv\nkind: Pod\n```\n",
		want:     []Block{{Name: "static-pv", Line: 3, YAML: "# guide: static-pv\nkind: Pod\n"}},
	}, {
		name:     "a values file, a fragment, a shell block and a block without info string are no examples",
		markdown: "```yaml\n# my-values.yaml\ns3: {}\n```\n```yaml\nkind: Pod\n```\n```sh\nhelm install s3csi\n```\n```\nkind: Pod\n```\n",
	}, {
		name:     "the marker on a block of another info string is an error, so that a typo is not left untested",
		markdown: "```yml\n# guide: typo\nkind: Pod\n```\n",
		wantErr:  `line 1: block "typo" has the info string "yml": an example to apply must be ` + "```yaml",
	}, {
		name:     "two blocks of one name are an error",
		markdown: "```yaml\n# guide: a\nkind: Pod\n```\n```yaml\n# guide: a\nkind: Pod\n```\n",
		wantErr:  `line 5: block "a" is already the name of the block at line 1`,
	}, {
		name:     "a name that is not lowercase words joined by '-' is an error",
		markdown: "```yaml\n# guide: Static PV\nkind: Pod\n```\n",
		wantErr:  `line 1: "Static PV" is not a block name`,
	}, {
		name:     "an empty name is an error",
		markdown: "```yaml\n# guide:\nkind: Pod\n```\n",
		wantErr:  `line 1: "" is not a block name`,
	}, {
		name:     "a block never closed is an error",
		markdown: "text\n```yaml\n# guide: open\nkind: Pod\n",
		wantErr:  "line 2: the code block is never closed",
	}, {
		name:     "a longer fence holds a shorter one, which is its content and no example",
		markdown: "````markdown\n```yaml\n# guide: inner\n```\n````\n",
	}, {
		name:     "a fence indented in a list item is read without its indentation",
		markdown: "- step\n\n  ```yaml\n  # guide: in-list\n  kind: Pod\n  metadata:\n    name: p\n  ```\n",
		want:     []Block{{Name: "in-list", Line: 3, YAML: "# guide: in-list\nkind: Pod\nmetadata:\n  name: p\n"}},
	}, {
		name:     "inline code with three backticks opens no block",
		markdown: "use ```yaml``` blocks\n```yaml\n# guide: after\nkind: Pod\n```\n",
		want:     []Block{{Name: "after", Line: 2, YAML: "# guide: after\nkind: Pod\n"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Blocks(tc.markdown)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Blocks() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Blocks() = %#v, want %#v", got, tc.want)
			}
		})
	}
}

var target = Target{
	Namespace: "guide-x1", Bucket: "e2e-guide-x1", NamePrefix: "guide-x1",
	Image: "s3csi/busybox:1.35", PullPolicy: "IfNotPresent", GracePeriodSeconds: ptr.To[int64](1),
	AccessKeyID: "GUIDEX1", SecretAccessKey: "secret-x1",
}

const static = `# guide: static
apiVersion: v1
kind: Secret
metadata: {name: keys}
stringData: {access_key_id: my-access-key-id, secret_access_key: my-secret-access-key}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: s3-pv}
spec:
  storageClassName: ""
  claimRef: {namespace: default, name: claim}
  csi:
    driver: s3.csi.scality.com
    volumeHandle: my-bucket-1
    volumeAttributes: {bucketName: my-bucket}
    nodePublishSecretRef: {name: keys, namespace: default}
---
# a comment-only document is skipped
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: claim}
spec: {storageClassName: "", volumeName: s3-pv}
---
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  initContainers: [{name: init, image: "busybox:1.36"}]
  containers: [{name: app, image: busybox, imagePullPolicy: Always}]
`

const dynamic = `# guide: dynamic
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: s3-sc}
provisioner: s3.csi.scality.com
parameters:
  csi.storage.k8s.io/provisioner-secret-name: keys
  csi.storage.k8s.io/provisioner-secret-namespace: default
  csi.storage.k8s.io/node-publish-secret-namespace: ${pvc.namespace}
`

// A later example uses the StorageClass of an earlier one.
const laterClaim = `# guide: later
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: later}
spec: {storageClassName: s3-sc}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: elsewhere}
spec: {storageClassName: standard}
`

func TestPrepareFillsThePlaceholdersIn(t *testing.T) {
	examples, err := Prepare([]Block{{Name: "static", YAML: static}, {Name: "dynamic", YAML: dynamic}, {Name: "later", YAML: laterClaim}}, target)
	if err != nil {
		t.Fatal(err)
	}
	if len(examples) != 3 || len(examples[0].Objects) != 4 {
		t.Fatalf("Prepare() = %d examples, the first of %d objects; want 3, the first of 4", len(examples), len(examples[0].Objects))
	}
	secret, pv, claim, pod := examples[0].Objects[0], examples[0].Objects[1], examples[0].Objects[2], examples[0].Objects[3]
	sc, later, elsewhere := examples[1].Objects[0], examples[2].Objects[0], examples[2].Objects[1]
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		path []string
		want any
	}{
		{"the Secret's access key is the test's", secret, []string{"stringData", "access_key_id"}, "GUIDEX1"},
		{"the Secret's secret key is the test's", secret, []string{"stringData", "secret_access_key"}, "secret-x1"},
		{"the PersistentVolume gets a unique name", pv, []string{"metadata", "name"}, "guide-x1-s3-pv"},
		{"the bucket is the test's", pv, []string{"spec", "csi", "volumeAttributes", "bucketName"}, "e2e-guide-x1"},
		{"a volume handle derived from the bucket follows it", pv, []string{"spec", "csi", "volumeHandle"}, "e2e-guide-x1-1"},
		{"the node publish Secret is in the test's namespace", pv, []string{"spec", "csi", "nodePublishSecretRef", "namespace"}, "guide-x1"},
		{"the claim reference is in the test's namespace", pv, []string{"spec", "claimRef", "namespace"}, "guide-x1"},
		{"the claim names the renamed volume", claim, []string{"spec", "volumeName"}, "guide-x1-s3-pv"},
		{"the claim keeps the empty StorageClass", claim, []string{"spec", "storageClassName"}, ""},
		{"the pod's grace period is the test's", pod, []string{"spec", "terminationGracePeriodSeconds"}, int64(1)},
		{"the StorageClass gets a unique name", sc, []string{"metadata", "name"}, "guide-x1-s3-sc"},
		{"a provisioner Secret's namespace is the test's", sc, []string{"parameters", "csi.storage.k8s.io/provisioner-secret-namespace"}, "guide-x1"},
		{"a templated Secret namespace is kept", sc, []string{"parameters", "csi.storage.k8s.io/node-publish-secret-namespace"}, "${pvc.namespace}"},
		{"a claim of a later example names the renamed StorageClass", later, []string{"spec", "storageClassName"}, "guide-x1-s3-sc"},
		{"a StorageClass of no example is kept", elsewhere, []string{"spec", "storageClassName"}, "standard"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found, err := unstructured.NestedFieldNoCopy(tc.obj.Object, tc.path...)
			if err != nil || !found || got != tc.want {
				t.Errorf("%s = %#v (found %v, %v), want %#v", strings.Join(tc.path, "."), got, found, err, tc.want)
			}
		})
	}
	t.Run("every container runs the test's image with its pull policy", func(t *testing.T) {
		for _, list := range []string{"initContainers", "containers"} {
			cs, _, _ := unstructured.NestedSlice(pod.Object, "spec", list)
			for _, c := range cs {
				m := c.(map[string]any)
				if m["image"] != "s3csi/busybox:1.35" || m["imagePullPolicy"] != "IfNotPresent" {
					t.Errorf("%s %v: image %v, pull policy %v", list, m["name"], m["image"], m["imagePullPolicy"])
				}
			}
		}
	})
	t.Run("namespaced objects get no namespace: kubectl apply -n gives it", func(t *testing.T) {
		if claim.GetNamespace() != "" || pod.GetNamespace() != "" {
			t.Errorf("namespaces %q, %q", claim.GetNamespace(), pod.GetNamespace())
		}
	})
	t.Run("the manifest holds every object", func(t *testing.T) {
		m, err := Manifest(examples[0].Objects)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(m), "---\n"); n != 4 {
			t.Errorf("the manifest has %d documents, want 4:\n%s", n, m)
		}
		if !strings.Contains(string(m), "name: guide-x1-s3-pv") {
			t.Errorf("the manifest lacks the renamed volume:\n%s", m)
		}
	})
}

func TestPrepareRefusesWhatTheTestCannotApplySafely(t *testing.T) {
	for _, tc := range []struct{ name, yaml, wantErr string }{{
		name:    "a namespaced object naming its namespace",
		yaml:    "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {containers: [{name: c, image: busybox}]}\n",
		wantErr: `Pod p: names namespace "default"`,
	}, {
		name:    "a kind the test does not know the scope of",
		yaml:    "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\n",
		wantErr: "ClusterRole r: the test does not know whether this kind is namespaced",
	}, {
		name:    "a container of another image than busybox",
		yaml:    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: nginx}]}\n",
		wantErr: `container c runs "nginx"`,
	}, {
		name:    "a Secret written with data",
		yaml:    "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {access_key_id: eA==}\n",
		wantErr: "write the example's Secret with stringData",
	}, {
		name:    "a block without objects",
		yaml:    "# guide: empty\n",
		wantErr: "it holds no object",
	}, {
		name:    "a document that is not YAML",
		yaml:    "kind: [Pod\n",
		wantErr: "document 1",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Prepare([]Block{{Name: "bad", Line: 7, YAML: tc.yaml}}, target)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `block "bad" (line 7)`) {
				t.Errorf("Prepare() error = %v, want one naming the block and containing %q", err, tc.wantErr)
			}
		})
	}
}

// The guide's own examples parse and prepare without a cluster, and each follows the convention
// the e2e test checks: its pods print hello.txt of their volume.
func TestTheOperatorGuidesExamplesPrepare(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operator-guide.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Blocks(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatal("docs/operator-guide.md has no ```yaml block starting with " + Marker)
	}
	examples, err := Prepare(blocks, target)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range examples {
		pods := 0
		for _, o := range e.Objects {
			if o.GetKind() != "Pod" {
				continue
			}
			pods++
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "containers")
			if !strings.Contains(strings.Join(commandOf(cs), " "), "cat /data/hello.txt") {
				t.Errorf("block %q: pod %s does not print /data/hello.txt, which the e2e test looks for in its log", e.Name, o.GetName())
			}
		}
		if pods == 0 {
			t.Errorf("block %q has no pod: the e2e test checks an example through its pods", e.Name)
		}
	}
}

func commandOf(containers []any) []string {
	var out []string
	for _, c := range containers {
		m, _ := c.(map[string]any)
		for _, key := range []string{"command", "args"} {
			args, _ := m[key].([]any)
			for _, a := range args {
				s, _ := a.(string)
				out = append(out, s)
			}
		}
	}
	return out
}
