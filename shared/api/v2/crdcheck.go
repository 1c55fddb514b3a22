package v2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/openapi"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrCRDOutdated is returned by CheckCRD when the cluster's attachment CRD is not the one these
// types need: the API server cannot filter attachments on SelectableFields, or its schema lacks
// spec fields (the server would drop them from every attachment written).
var ErrCRDOutdated = errors.New("the MountpointS3PodAttachment CRD in the cluster is outdated")

// CRDFix is the command that brings the cluster's CRD to the chart's, named in ErrCRDOutdated.
const CRDFix = "the janitor applies the chart's CRD at start (the chart grants it patch on this CRD); " +
	"without it run `helm show crds <the s3csi chart> | kubectl apply --server-side --force-conflicts -f -` " +
	"on Kubernetes 1.32 or newer, then restart this pod"

// CheckCRD returns nil when the cluster's attachment CRD is the one these types need, an error
// wrapping ErrCRDOutdated, which names what is missing and CRDFix, when it is not, and any other
// error (an unreachable server) as it is. It checks two things, with what every service may
// read (no RBAC on CRDs):
//   - the API server filters attachments on every SelectableFields field (a List of at most one
//     attachment); a CRD that predates them, or a server older than 1.32, fails every lookup
//     with "field label not supported";
//   - the server's OpenAPI schema of the attachments (oa; published to every authenticated
//     client) has every spec field of the embedded CRD. The Scality driver's CRD has no
//     readOnly: the server drops the one s3csi writes, and a read-write workload would share a
//     read-only Mountpoint Pod.
func CheckCRD(ctx context.Context, r client.Reader, oa openapi.Client) error {
	terms := make([]fields.Selector, 0, len(SelectableFields))
	for _, f := range SelectableFields {
		terms = append(terms, fields.OneTermEqualSelector(f, "s3csi-startup-check"))
	}
	var list MountpointS3PodAttachmentList
	err := r.List(ctx, &list, client.MatchingFieldsSelector{Selector: fields.AndSelectors(terms...)}, client.Limit(1))
	switch {
	case apierrors.IsBadRequest(err):
		return fmt.Errorf("%w: it lacks selectableFields (%s; the server said: %w); %s",
			ErrCRDOutdated, strings.Join(SelectableFields, ", "), err, CRDFix)
	case err != nil:
		return fmt.Errorf("check the MountpointS3PodAttachment CRD's selectable fields: %w", err)
	}
	missing, err := missingSpecFields(oa)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: its schema lacks spec fields %s, which the API server drops from every attachment; %s",
			ErrCRDOutdated, strings.Join(missing, ", "), CRDFix)
	}
	return nil
}

// missingSpecFields returns the spec fields of the embedded CRD that the server's OpenAPI
// schema of the attachments lacks.
func missingSpecFields(oa openapi.Client) ([]string, error) {
	crd, err := CRD()
	if err != nil {
		return nil, err
	}
	want := specFields(crd.Object, GroupVersion.Version)
	paths, err := oa.Paths()
	if err != nil {
		return nil, fmt.Errorf("read the API server's OpenAPI paths: %w", err)
	}
	gv, ok := paths["apis/"+GroupVersion.Group+"/"+GroupVersion.Version]
	if !ok {
		return nil, fmt.Errorf("%w: the API server serves no %s (is the CRD installed?); %s", ErrCRDOutdated, GroupVersion, CRDFix)
	}
	raw, err := gv.Schema("application/json")
	if err != nil {
		return nil, fmt.Errorf("read the OpenAPI schema of %s: %w", GroupVersion, err)
	}
	have, err := servedSpecFields(raw)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, f := range want {
		if !slices.Contains(have, f) {
			missing = append(missing, f)
		}
	}
	return missing, nil
}

// servedSpecFields returns the spec properties of the attachment kind in an OpenAPI v3
// document of its group version.
func servedSpecFields(raw []byte) ([]string, error) {
	type schema struct {
		Properties map[string]schema `json:"properties"`
		GVK        []struct {
			Group, Version, Kind string
		} `json:"x-kubernetes-group-version-kind"`
	}
	var doc struct {
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("decode the OpenAPI schema of %s: %w", GroupVersion, err)
	}
	for _, s := range doc.Components.Schemas {
		for _, gvk := range s.GVK {
			if gvk.Group == GroupVersion.Group && gvk.Version == GroupVersion.Version && gvk.Kind == "MountpointS3PodAttachment" {
				names := make([]string, 0, len(s.Properties["spec"].Properties))
				for name := range s.Properties["spec"].Properties {
					names = append(names, name)
				}
				return names, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: the API server's OpenAPI schema of %s has no MountpointS3PodAttachment; %s", ErrCRDOutdated, GroupVersion, CRDFix)
}
