package chart

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/testenv"
)

// renderWith renders the default ci values with more helm arguments.
func renderWith(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helmTemplate(t, append([]string{"--values", filepath.Join(chartDir(t), "ci", "default-values.yaml")}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// requiredTerms returns the required node selector terms of a pod spec, each as its match
// expressions written key/operator/values.
func requiredTerms(spec map[string]any) [][]string {
	terms, _, _ := unstructured.NestedSlice(spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
	var out [][]string
	for _, term := range terms {
		m, _ := term.(map[string]any)
		exprs, _, _ := unstructured.NestedSlice(m, "matchExpressions")
		var es []string
		for _, e := range exprs {
			em, _ := e.(map[string]any)
			es = append(es, fmt.Sprintf("%v/%v/%v", em["key"], em["operator"], em["values"]))
		}
		out = append(out, es)
	}
	return out
}

// Every pod of the chart runs only on a node whose architecture has an image: a node of another
// one would pull nothing it can run and crash-loop.
func TestEveryPodRequiresANodeOfAnArchitectureWithAnImage(t *testing.T) {
	const arch = "kubernetes.io/arch/In/[amd64 arm64]"
	t.Run("by default every workload requires amd64 or arm64", func(t *testing.T) {
		for name, spec := range podSpecs(t, renderWith(t)) {
			if got := requiredTerms(spec); !slices.Equal(slices.Concat(got...), []string{arch}) || len(got) != 1 {
				t.Errorf("%s: required node terms %v, want one term [%s]", name, got, arch)
			}
		}
	})
	t.Run("a component's own required terms each also require the architecture", func(t *testing.T) {
		base := "node.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
		objs := renderWith(t,
			"--set", base+"[0].matchExpressions[0].key=zone", "--set", base+"[0].matchExpressions[0].operator=Exists",
			"--set", base+"[1].matchFields[0].key=metadata.name", "--set", base+"[1].matchFields[0].operator=In",
			"--set", base+"[1].matchFields[0].values[0]=node-a")
		got := requiredTerms(podSpecs(t, objs)["DaemonSet s3csi-node-agent"])
		want := [][]string{{"zone/Exists/<nil>", arch}, {arch}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("node-agent required node terms %v, want %v (the arch ANDed into each alternative)", got, want)
		}
	})
	t.Run("image.architectures=[] requires none", func(t *testing.T) {
		for name, spec := range podSpecs(t, renderWith(t, "--set-json", "image.architectures=[]")) {
			if got := requiredTerms(spec); len(got) != 0 {
				t.Errorf("%s: required node terms %v, want none", name, got)
			}
		}
	})
	t.Run("an architecture without an image is refused", func(t *testing.T) {
		_, err := helmTemplate(t, "--values", filepath.Join(chartDir(t), "ci", "default-values.yaml"), "--set-json", `image.architectures=["s390x"]`)
		if err == nil || !strings.Contains(err.Error(), "/image/architectures/0") {
			t.Errorf("image.architectures=[s390x]: error %v, want the schema to refuse it", err)
		}
	})
}

// The Mountpoint Pods pull the mounter image with the chart's pull Secrets unless
// mountpointPod.imagePullSecrets names others or none.
func TestMountpointPodsPullWithTheChartsSecrets(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // the pod-reconciler's flag, "" for none
	}{
		{"no Secrets", nil, ""},
		{"imagePullSecrets reach the Mountpoint Pods", []string{"--set-json", `imagePullSecrets=["regcred",{"name":"mirror"}]`}, "regcred,mirror"},
		{"mountpointPod.imagePullSecrets replaces them", []string{"--set-json", `imagePullSecrets=["regcred"]`, "--set-json", `mountpointPod.imagePullSecrets=[{"name":"mp"}]`}, "mp"},
		{"mountpointPod.imagePullSecrets=[] gives none", []string{"--set-json", `imagePullSecrets=["regcred"]`, "--set-json", `mountpointPod.imagePullSecrets=[]`}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderWith(t, tc.args...)
			var got string
			for _, a := range args(container(t, objs, "Deployment", "s3csi-pod-reconciler", "pod-reconciler")) {
				if v, ok := strings.CutPrefix(a, "--mountpoint-image-pull-secrets="); ok {
					got = v
				}
			}
			if got != tc.want {
				t.Errorf("--mountpoint-image-pull-secrets=%q, want %q", got, tc.want)
			}
		})
	}
	_, err := helmTemplate(t, "--values", filepath.Join(chartDir(t), "ci", "default-values.yaml"), "--set-json", `mountpointPod.imagePullSecrets=["Not_A_Name"]`)
	if err == nil || !strings.Contains(err.Error(), "/mountpointPod/imagePullSecrets") {
		t.Errorf("a pull Secret that is not a name: error %v, want the schema to refuse it", err)
	}
}

// The install notes name the pull Secrets the Mountpoint namespace lacks, and only those.
func TestTheNotesNameThePullSecretsTheMountpointNamespaceLacks(t *testing.T) {
	api := testenv.StartAPIServer(t)
	ns := mppod.DefaultNamespace
	if err := api.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	present := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: ns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)},
	}
	if err := api.Client.Create(t.Context(), present); err != nil {
		t.Fatal(err)
	}
	out, err := helmRun(t, api.KubeconfigFile(t), "install", releaseName, chartDir(t), "--create-namespace",
		"--values", filepath.Join(chartDir(t), "ci", "default-values.yaml"), "--set-json", `imagePullSecrets=["regcred","mirror"]`)
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	notes := string(out)
	if !strings.Contains(notes, "pull the mounter image with the Secrets mirror of namespace\n"+ns+", which lacks them") {
		t.Errorf("the notes do not name the missing Secret mirror:\n%s", notes)
	}
	if strings.Contains(notes, "Secrets regcred") || strings.Contains(notes, "regcred, mirror") {
		t.Errorf("the notes call regcred missing, which exists:\n%s", notes)
	}
}

// An image pinned by digest (a tag sha256:<hex>) is referenced as <repository>@sha256:<hex>, which
// is what a container runtime resolves; <repository>:sha256:<hex> is no reference at all.
func TestADigestTagPinsTheImage(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	objs := renderWith(t, "--set", "image.registry=registry.example:5000", "--set", "image.tags.mounter="+digest, "--set", "image.tag="+digest)
	want := "registry.example:5000/s3csi/mounter@" + digest
	if got := args(container(t, objs, "Deployment", "s3csi-pod-reconciler", "pod-reconciler")); !slices.Contains(got, "--mountpoint-image="+want) {
		t.Errorf("the pod-reconciler is not given --mountpoint-image=%s: %v", want, got)
	}
	for name, spec := range podSpecs(t, objs) {
		cs, _, _ := unstructured.NestedSlice(spec, "containers")
		for _, c := range cs {
			m, _ := c.(map[string]any)
			if image := fmt.Sprint(m["image"]); !strings.Contains(image, "@"+digest) {
				t.Errorf("%s runs %s, want an image pinned @%s", name, image, digest)
			}
		}
	}
}
