package guide

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Placeholders the guide's examples write, as a reader would.
const (
	// Bucket is the bucket of the static examples; every occurrence in a block's text (its
	// bucketName, and volume handles derived from it) becomes Target.Bucket.
	Bucket = "my-bucket"
	// Image is the image of the examples' containers, with or without a tag.
	Image = "busybox"
)

// Target says where a test applies the examples and what fills their placeholders in.
type Target struct {
	// Namespace is where every namespaced object goes (applied with kubectl -n): the examples
	// write no namespace of their own, and the Secret references of PersistentVolumes and
	// StorageClasses are pointed there.
	Namespace string
	// Bucket replaces the placeholder Bucket.
	Bucket string
	// NamePrefix and "-" are put before the name of each cluster-scoped object
	// (PersistentVolume, StorageClass) and of every reference to it (a claim's volumeName and
	// storageClassName), so that a run never meets the objects of another.
	NamePrefix string
	// Image and PullPolicy replace the image and pull policy of every container.
	Image, PullPolicy string
	// GracePeriodSeconds, when not nil, replaces the pods' terminationGracePeriodSeconds.
	GracePeriodSeconds *int64
	// AccessKeyID and SecretAccessKey replace the values of the keys access_key_id and
	// secret_access_key in the stringData of every Secret.
	AccessKeyID, SecretAccessKey string
}

// scopes says, for each kind an example may hold, whether it is cluster-scoped. A kind that is
// not listed is refused: applied with -n, an unknown cluster-scoped kind would escape both the
// renaming and the test's clean-up.
var scopes = map[string]bool{
	"PersistentVolume":      true,
	"StorageClass":          true,
	"PersistentVolumeClaim": false,
	"Pod":                   false,
	"Secret":                false,
	"ConfigMap":             false,
	"ServiceAccount":        false,
	"Deployment":            false,
	"StatefulSet":           false,
}

// ClusterScoped reports whether objects of kind are cluster-scoped.
func ClusterScoped(kind string) bool { return scopes[kind] }

// Example is a block of the guide and its objects, ready to apply.
type Example struct {
	Block
	Objects []*unstructured.Unstructured
}

// Prepare parses the documents of every block and fills their placeholders in for t. A reference
// to a cluster-scoped object of any block is renamed with it, so a later example may use the
// StorageClass of an earlier one. Every problem is reported at once, naming the block and the
// object.
func Prepare(blocks []Block, t Target) ([]Example, error) {
	var (
		examples []Example
		errs     []error
	)
	renamed := map[string]string{} // kind/name → new name
	for _, b := range blocks {
		objs, err := b.parse(t.Bucket)
		for _, o := range objs {
			cluster, known := scopes[o.GetKind()]
			switch {
			case !known:
				err = errors.Join(err, fmt.Errorf("%s %s: the test does not know whether this kind is namespaced: add it to guide.scopes", o.GetKind(), o.GetName()))
			case cluster:
				renamed[o.GetKind()+"/"+o.GetName()] = t.NamePrefix + "-" + o.GetName()
			case o.GetNamespace() != "":
				err = errors.Join(err, fmt.Errorf("%s %s: names namespace %q; an example writes none, so that it is applied where the reader is", o.GetKind(), o.GetName(), o.GetNamespace()))
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("block %q (line %d): %w", b.Name, b.Line, err))
		}
		examples = append(examples, Example{Block: b, Objects: objs})
	}
	for _, e := range examples {
		for _, o := range e.Objects {
			if err := fill(o, t, renamed); err != nil {
				errs = append(errs, fmt.Errorf("block %q (line %d): %s %s: %w", e.Name, e.Line, o.GetKind(), o.GetName(), err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("prepare the guide's examples: %w", err)
	}
	return examples, nil
}

// parse returns the objects of the block's documents, with the placeholder Bucket replaced.
func (b Block) parse(bucket string) ([]*unstructured.Unstructured, error) {
	text := strings.ReplaceAll(b.YAML, Bucket, bucket)
	var (
		objs []*unstructured.Unstructured
		errs []error
	)
	for i, doc := range splitDocuments(text) {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i+1, err))
			continue
		}
		if s := string(bytes.TrimSpace(j)); s == "null" || s == "" {
			continue // comments only
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i+1, err))
			continue
		}
		objs = append(objs, o)
	}
	if len(objs) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("it holds no object"))
	}
	return objs, errors.Join(errs...)
}

// splitDocuments splits a YAML stream at its "---" lines.
func splitDocuments(text string) []string {
	var docs []string
	var cur strings.Builder
	for line := range strings.SplitSeq(text, "\n") {
		if strings.TrimRight(line, " \t") == "---" {
			docs = append(docs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
	}
	return append(docs, cur.String())
}

// fill fills the placeholders of one object in.
func fill(o *unstructured.Unstructured, t Target, renamed map[string]string) error {
	ref := func(kind string, fields ...string) error {
		name, found, err := unstructured.NestedString(o.Object, fields...)
		if err != nil || !found {
			return err
		}
		if to, ok := renamed[kind+"/"+name]; ok {
			return unstructured.SetNestedField(o.Object, to, fields...)
		}
		return nil
	}
	var errs []error
	if to, ok := renamed[o.GetKind()+"/"+o.GetName()]; ok {
		o.SetName(to)
	}
	switch o.GetKind() {
	case "PersistentVolumeClaim":
		errs = append(errs, ref("PersistentVolume", "spec", "volumeName"), ref("StorageClass", "spec", "storageClassName"))
	case "PersistentVolume":
		errs = append(errs, ref("StorageClass", "spec", "storageClassName"))
		for _, f := range [][]string{
			{"spec", "claimRef"}, {"spec", "csi", "nodePublishSecretRef"}, {"spec", "csi", "nodeStageSecretRef"},
			{"spec", "csi", "controllerPublishSecretRef"}, {"spec", "csi", "controllerExpandSecretRef"}, {"spec", "csi", "nodeExpandSecretRef"},
		} {
			switch _, found, err := unstructured.NestedMap(o.Object, f...); {
			case err != nil:
				errs = append(errs, err)
			case found:
				errs = append(errs, unstructured.SetNestedField(o.Object, t.Namespace, append(f, "namespace")...))
			}
		}
	case "StorageClass":
		params, _, err := unstructured.NestedStringMap(o.Object, "parameters")
		errs = append(errs, err)
		changed := false
		for k, v := range params {
			if strings.HasSuffix(k, "-secret-namespace") && !strings.Contains(v, "${") {
				params[k], changed = t.Namespace, true
			}
		}
		if changed {
			errs = append(errs, unstructured.SetNestedStringMap(o.Object, params, "parameters"))
		}
	case "Secret":
		errs = append(errs, fillSecret(o, t))
	case "Pod":
		errs = append(errs, fillPodSpec(o.Object, t, "spec"))
	case "Deployment", "StatefulSet":
		errs = append(errs, fillPodSpec(o.Object, t, "spec", "template", "spec"))
	}
	return errors.Join(errs...)
}

// fillSecret puts the test's keys into a Secret written with stringData.
func fillSecret(o *unstructured.Unstructured, t Target) error {
	if _, found, _ := unstructured.NestedFieldNoCopy(o.Object, "data"); found {
		return errors.New("write the example's Secret with stringData, which a reader can edit and the test can fill in")
	}
	data, found, err := unstructured.NestedStringMap(o.Object, "stringData")
	if err != nil || !found {
		return err
	}
	for k, v := range map[string]string{"access_key_id": t.AccessKeyID, "secret_access_key": t.SecretAccessKey} {
		if _, ok := data[k]; ok {
			data[k] = v
		}
	}
	return unstructured.SetNestedStringMap(o.Object, data, "stringData")
}

// fillPodSpec replaces the image and pull policy of every container of the pod spec at path,
// and its grace period.
func fillPodSpec(obj map[string]any, t Target, path ...string) error {
	var errs []error
	for _, list := range []string{"initContainers", "containers"} {
		containers, found, err := unstructured.NestedSlice(obj, append(path, list)...)
		if err != nil || !found {
			errs = append(errs, err)
			continue
		}
		for i, c := range containers {
			m, ok := c.(map[string]any)
			if !ok {
				errs = append(errs, fmt.Errorf("%s[%d] is not an object", list, i))
				continue
			}
			image, _ := m["image"].(string)
			if image != Image && !strings.HasPrefix(image, Image+":") {
				errs = append(errs, fmt.Errorf("container %v runs %q: the examples run %s, which the test replaces with an image the cluster has", m["name"], image, Image))
				continue
			}
			m["image"], m["imagePullPolicy"] = t.Image, t.PullPolicy
		}
		errs = append(errs, unstructured.SetNestedSlice(obj, containers, append(path, list)...))
	}
	if t.GracePeriodSeconds != nil {
		errs = append(errs, unstructured.SetNestedField(obj, *t.GracePeriodSeconds, append(path, "terminationGracePeriodSeconds")...))
	}
	return errors.Join(errs...)
}

// Manifest renders objects as one YAML stream, for kubectl apply -f.
func Manifest(objs []*unstructured.Unstructured) ([]byte, error) {
	var b bytes.Buffer
	for _, o := range objs {
		j, err := o.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("render %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		y, err := yaml.JSONToYAML(j)
		if err != nil {
			return nil, fmt.Errorf("render %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}
