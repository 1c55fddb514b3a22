package v2_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/testenv"
)

// TestTheStartupCheckNamesTheFixWhenTheCRDLacksSelectableFields is scenario S25: after an
// upgrade that left the CRD of an older release in place (Helm does not upgrade CRDs), the
// services' startup check fails with a message naming the CRD and the command that fixes it;
// with the chart's CRD it passes.
func TestTheStartupCheckNamesTheFixWhenTheCRDLacksSelectableFields(t *testing.T) {
	api := testenv.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s3csiv2.CheckSelectableFields(ctx, api.Client); err != nil {
		t.Fatalf("with the chart's CRD: %v", err)
	}

	var crd apiextensionsv1.CustomResourceDefinition
	if err := api.Client.Get(ctx, client.ObjectKey{Name: "mountpoints3podattachments." + s3csiv2.GroupVersion.Group}, &crd); err != nil {
		t.Fatal(err)
	}
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].SelectableFields = nil
	}
	if err := api.Client.Update(ctx, &crd); err != nil {
		t.Fatalf("install the CRD without selectable fields: %v", err)
	}
	var err error
	for err = s3csiv2.CheckSelectableFields(ctx, api.Client); err == nil && ctx.Err() == nil; err = s3csiv2.CheckSelectableFields(ctx, api.Client) {
		time.Sleep(100 * time.Millisecond) // the API server serves the updated CRD shortly
	}
	if !errors.Is(err, s3csiv2.ErrSelectableFieldsMissing) {
		t.Fatalf("with a CRD without selectable fields: %v, want ErrSelectableFieldsMissing", err)
	}
	for _, want := range []string{"selectableFields", "spec.nodeName", "kubectl apply --server-side -f charts/s3csi/crds/", "field label not supported"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Logf("the message: %v", err)
}
