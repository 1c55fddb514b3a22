package v2

import (
	"context"
	_ "embed"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// crdYAML is the attachment CRD as controller-gen writes it from this package's types (`make
// generate` copies charts/s3csi/crds/ here; a test keeps the two equal).
//
//go:embed crd.yaml
var crdYAML []byte

// CRDName is the name of the attachment CRD.
const CRDName = "mountpoints3podattachments.s3.csi.scality.com"

// CRDFieldOwner is the field manager of ApplyCRD's server-side apply.
const CRDFieldOwner = "s3csi-janitor"

// CRD returns a new copy of the attachment CRD these types need.
func CRD() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(crdYAML, &u.Object); err != nil {
		return nil, fmt.Errorf("decode the embedded CRD: %w", err)
	}
	return u, nil
}

// ApplyCRD brings the cluster's attachment CRD to the one these types need, by server-side
// apply with CRDFieldOwner, taking over fields another manager set (the Scality driver's chart,
// an older s3csi release): Helm installs a chart's CRD only when it is absent and never upgrades
// it, so without this an upgrade, or a switch from the Scality driver (whose CRD has no
// readOnly), keeps a schema that drops fields the services write. It patches an existing CRD
// only: the chart's RBAC grants patch on this one CRD, not create, and Helm creates it on
// first install.
func ApplyCRD(ctx context.Context, c client.Client) error {
	u, err := CRD()
	if err != nil {
		return err
	}
	//nolint:staticcheck // client.Apply with an unstructured object is the apply patch this version offers.
	if err := c.Patch(ctx, u, client.Apply, client.FieldOwner(CRDFieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the MountpointS3PodAttachment CRD: %w", err)
	}
	return nil
}

// specFields returns the names of the properties of spec in the CRD's schema of version v.
func specFields(crd map[string]any, v string) []string {
	versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
	for _, ver := range versions {
		m, ok := ver.(map[string]any)
		if !ok || m["name"] != v {
			continue
		}
		props, _, _ := unstructured.NestedMap(m, "schema", "openAPIV3Schema", "properties", "spec", "properties")
		names := make([]string, 0, len(props))
		for name := range props {
			names = append(names, name)
		}
		slices.Sort(names)
		return names
	}
	return nil
}
