package v2_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/testenv"
)

// TestTheEmbeddedCRDIsTheCharts keeps the CRD the janitor applies equal to the one the chart
// installs.
func TestTheEmbeddedCRDIsTheCharts(t *testing.T) {
	chart, err := os.ReadFile(filepath.Join("..", "..", "..", "charts", "s3csi", "crds", "s3.csi.scality.com_mountpoints3podattachments.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := os.ReadFile("crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chart, embedded) {
		t.Fatal("shared/api/v2/crd.yaml differs from charts/s3csi/crds/: run `make generate`")
	}
}

// outdate replaces the cluster's CRD with mutate's change of it and waits until CheckCRD
// returns ErrCRDOutdated saying want (the API server serves an updated CRD shortly, its
// OpenAPI schema a little later); it returns CheckCRD's last error.
func outdate(ctx context.Context, t *testing.T, api *testenv.APIServer, oa openapi.Client, want string, mutate func(*apiextensionsv1.CustomResourceDefinition)) error {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := api.Client.Get(ctx, client.ObjectKey{Name: s3csiv2.CRDName}, &crd); err != nil {
		t.Fatal(err)
	}
	mutate(&crd)
	if err := api.Client.Update(ctx, &crd); err != nil {
		t.Fatalf("install the outdated CRD: %v", err)
	}
	for {
		err := s3csiv2.CheckCRD(ctx, api.Client, oa)
		if errors.Is(err, s3csiv2.ErrCRDOutdated) && strings.Contains(err.Error(), want) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// upToDate waits until CheckCRD passes: a new API server, or one that just took a CRD, publishes
// the group's OpenAPI schema shortly after it serves the group.
func upToDate(ctx context.Context, t *testing.T, api *testenv.APIServer, oa openapi.Client, what string) {
	t.Helper()
	for {
		err := s3csiv2.CheckCRD(ctx, api.Client, oa)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func openAPI(t *testing.T, api *testenv.APIServer) openapi.Client {
	t.Helper()
	d, err := discovery.NewDiscoveryClientForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	return d.OpenAPIV3()
}

// TestTheStartupCheckNamesTheFixWhenTheCRDLacksSelectableFields is scenario S25: after an
// upgrade that left the CRD of an older release in place (Helm does not upgrade CRDs), the
// services' startup check fails with a message naming the CRD and the command that fixes it;
// with the chart's CRD it passes.
func TestTheStartupCheckNamesTheFixWhenTheCRDLacksSelectableFields(t *testing.T) {
	api := testenv.StartAPIServer(t)
	oa := openAPI(t, api)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	upToDate(ctx, t, api, oa, "with the chart's CRD")
	err := outdate(ctx, t, api, oa, "selectableFields", func(crd *apiextensionsv1.CustomResourceDefinition) {
		for i := range crd.Spec.Versions {
			crd.Spec.Versions[i].SelectableFields = nil
		}
	})
	if !errors.Is(err, s3csiv2.ErrCRDOutdated) {
		t.Fatalf("with a CRD without selectable fields: %v, want ErrCRDOutdated", err)
	}
	for _, want := range []string{"selectableFields", "spec.nodeName", "helm show crds", "kubectl apply --server-side", "field label not supported"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Logf("the message: %v", err)
}

// TestTheJanitorsApplyUpgradesTheScalityCRD: the Scality driver's CRD has no readOnly (and no
// selectable fields), and Helm keeps it when s3csi is installed. The startup check refuses it,
// naming readOnly and the fix; ApplyCRD, as the janitor runs it at start, brings it to the
// chart's, after which an attachment keeps its readOnly.
func TestTheJanitorsApplyUpgradesTheScalityCRD(t *testing.T) {
	api := testenv.StartAPIServer(t)
	oa := openAPI(t, api)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := outdate(ctx, t, api, oa, "selectableFields", func(crd *apiextensionsv1.CustomResourceDefinition) {
		crd.Annotations = map[string]string{"controller-gen.kubebuilder.io/version": "v0.16.3"} // as Scality 2.2's
		for i := range crd.Spec.Versions {
			crd.Spec.Versions[i].SelectableFields = nil
			delete(crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "readOnly")
		}
	})
	if !errors.Is(err, s3csiv2.ErrCRDOutdated) || !strings.Contains(err.Error(), "selectableFields") {
		t.Fatalf("with Scality's CRD: %v, want ErrCRDOutdated naming selectableFields", err)
	}

	// With the selectable fields back but still no readOnly, the schema check names it.
	err = outdate(ctx, t, api, oa, "spec fields readOnly", func(crd *apiextensionsv1.CustomResourceDefinition) {
		for i := range crd.Spec.Versions {
			for _, f := range s3csiv2.SelectableFields {
				crd.Spec.Versions[i].SelectableFields = append(crd.Spec.Versions[i].SelectableFields, apiextensionsv1.SelectableField{JSONPath: "." + f})
			}
		}
	})
	if !errors.Is(err, s3csiv2.ErrCRDOutdated) || !strings.Contains(err.Error(), "spec fields readOnly") {
		t.Fatalf("with a CRD without readOnly: %v, want ErrCRDOutdated naming readOnly", err)
	}
	t.Logf("the message: %v", err)

	if err := s3csiv2.ApplyCRD(ctx, api.Client); err != nil {
		t.Fatal(err)
	}
	upToDate(ctx, t, api, oa, "after ApplyCRD")
	a := &s3csiv2.MountpointS3PodAttachment{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "s3pa-"},
		Spec: s3csiv2.MountpointS3PodAttachmentSpec{
			NodeName: "n", PersistentVolumeName: "pv", VolumeID: "v", ReadOnly: true,
		},
	}
	if err := api.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	var got s3csiv2.MountpointS3PodAttachment
	if err := api.Client.Get(ctx, client.ObjectKeyFromObject(a), &got); err != nil {
		t.Fatal(err)
	}
	if !got.Spec.ReadOnly {
		t.Error("the upgraded CRD dropped the attachment's readOnly")
	}
}
