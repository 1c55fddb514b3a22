package v2_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
	"github.com/s3csi/s3csi/shared/testenv"
)

func attachment(name, node, pv string) *s3csiv2.MountpointS3PodAttachment {
	return &s3csiv2.MountpointS3PodAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: s3csiv2.MountpointS3PodAttachmentSpec{
			NodeName:             node,
			PersistentVolumeName: pv,
			VolumeID:             pv + "-handle",
			MountOptions:         "--allow-delete,--uid=1000",
			WorkloadFSGroup:      "1000",
			AuthenticationSource: s3csiv2.AuthenticationSourceDriver,
			MountpointS3PodAttachments: map[string][]s3csiv2.WorkloadAttachment{
				"mp-" + name: {{WorkloadPodUID: "uid-" + name, AttachmentTime: metav1.NewTime(time.Now().Truncate(time.Second))}},
			},
		},
	}
}

func TestCRDAgainstAPIServer(t *testing.T) {
	api := testenv.StartAPIServer(t)
	ctx := t.Context()
	c := api.Client

	for _, a := range []*s3csiv2.MountpointS3PodAttachment{
		attachment("a1", "node-a", "pv-1"),
		attachment("a2", "node-a", "pv-2"),
		attachment("b1", "node-b.example.com", "pv-1"),
	} {
		if err := c.Create(ctx, a); err != nil {
			t.Fatalf("create %s: %v", a.Name, err)
		}
	}

	t.Run("the CRD is cluster-scoped with short name s3pa and the selectable fields", func(t *testing.T) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: "mountpoints3podattachments.s3.csi.scality.com"}, crd); err != nil {
			t.Fatalf("get CRD: %v", err)
		}
		if crd.Spec.Scope != apiextensionsv1.ClusterScoped {
			t.Errorf("scope = %s, want Cluster", crd.Spec.Scope)
		}
		if got := crd.Spec.Names.ShortNames; len(got) != 1 || got[0] != "s3pa" {
			t.Errorf("short names = %v, want [s3pa]", got)
		}
		var got []string
		for _, f := range crd.Spec.Versions[0].SelectableFields {
			got = append(got, strings.TrimPrefix(f.JSONPath, "."))
		}
		if strings.Join(got, ",") != strings.Join(s3csiv2.SelectableFields, ",") {
			t.Errorf("selectable fields = %v, want %v", got, s3csiv2.SelectableFields)
		}
	})

	t.Run("the API server filters on spec.nodeName", func(t *testing.T) {
		// A dynamic client sends the field selector to the server and applies no filter of its own.
		dyn, err := dynamic.NewForConfig(api.Config)
		if err != nil {
			t.Fatal(err)
		}
		gvr := schema.GroupVersionResource{Group: "s3.csi.scality.com", Version: "v2", Resource: "mountpoints3podattachments"}
		for _, tt := range []struct {
			selector string
			want     []string
		}{
			{selector: "spec.nodeName=node-a", want: []string{"a1", "a2"}},
			{selector: "spec.nodeName=node-b.example.com", want: []string{"b1"}},
			{selector: "spec.nodeName=node-a,spec.persistentVolumeName=pv-2", want: []string{"a2"}},
			{selector: "spec.nodeName=nowhere", want: nil},
		} {
			list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{FieldSelector: tt.selector})
			if err != nil {
				t.Fatalf("list with %q: %v", tt.selector, err)
			}
			var names []string
			for _, item := range list.Items {
				names = append(names, item.GetName())
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Errorf("list with %q = %v, want %v", tt.selector, names, tt.want)
			}
		}
		_, err = dyn.Resource(gvr).List(ctx, metav1.ListOptions{FieldSelector: "spec.authenticationSource=driver"})
		if !apierrors.IsBadRequest(err) {
			t.Errorf("a field that is not selectable must be refused by the server, got %v", err)
		}
	})

	t.Run("the sharing key is immutable but the attachments map is not", func(t *testing.T) {
		a := &s3csiv2.MountpointS3PodAttachment{}
		if err := c.Get(ctx, client.ObjectKey{Name: "a1"}, a); err != nil {
			t.Fatal(err)
		}
		changed := a.DeepCopy()
		changed.Spec.NodeName = "node-c"
		err := c.Update(ctx, changed)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "nodeName is immutable") {
			t.Errorf("update of nodeName: got %v, want Invalid naming nodeName", err)
		}
		a.Spec.MountpointS3PodAttachments["mp-a1"] = append(a.Spec.MountpointS3PodAttachments["mp-a1"],
			s3csiv2.WorkloadAttachment{WorkloadPodUID: "uid-second", AttachmentTime: metav1.Now()})
		if err := c.Update(ctx, a); err != nil {
			t.Errorf("adding a workload: %v", err)
		}
	})

	t.Run("an attachment written by the Scality v2 driver is valid", func(t *testing.T) {
		a := attachment("scality", "node-a", "pv-3")
		a.Spec.AuthenticationSource = "" // the Scality v2 CRD has no such field
		if err := c.Create(ctx, a); err != nil {
			t.Errorf("create: %v", err)
		}
	})

	t.Run("bad attachments are refused", func(t *testing.T) {
		for name, mod := range map[string]func(*s3csiv2.MountpointS3PodAttachment){
			"empty node":          func(a *s3csiv2.MountpointS3PodAttachment) { a.Spec.NodeName = "" },
			"unknown auth source": func(a *s3csiv2.MountpointS3PodAttachment) { a.Spec.AuthenticationSource = "env" },
			"attachment with no uid": func(a *s3csiv2.MountpointS3PodAttachment) {
				a.Spec.MountpointS3PodAttachments["mp-x"] = []s3csiv2.WorkloadAttachment{{AttachmentTime: metav1.Now()}}
			},
		} {
			a := attachment("bad-"+strings.ReplaceAll(name, " ", "-"), "node-a", "pv-9")
			mod(a)
			if err := c.Create(ctx, a); !apierrors.IsInvalid(err) {
				t.Errorf("%s: got %v, want Invalid", name, err)
			}
		}
	})

	t.Run("cache indexes answer lookups by sharing key", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		informers, err := cache.New(api.Config, cache.Options{
			Scheme: api.Scheme,
			ByObject: map[client.Object]cache.ByObject{
				&s3csiv2.MountpointS3PodAttachment{}: {Field: fields.OneTermEqualSelector(s3csiv2.FieldNodeName, "node-a")},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s3csiv2.IndexFields(cctx, informers); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- informers.Start(cctx) }()
		if !informers.WaitForCacheSync(cctx) {
			t.Fatal("cache did not sync")
		}
		list := &s3csiv2.MountpointS3PodAttachmentList{}
		if err := informers.List(cctx, list, client.MatchingFields{s3csiv2.FieldPersistentVolumeName: "pv-1"}); err != nil {
			t.Fatal(err)
		}
		// b1 uses pv-1 too, but on node-b: the server-side selector kept it out of the cache.
		if len(list.Items) != 1 || list.Items[0].Name != "a1" {
			t.Errorf("indexed lookup = %d items, want only a1", len(list.Items))
		}
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("cache stopped with %v", err)
		}
	})
}

func TestIndexFieldsRefusesUnknownFields(t *testing.T) {
	err := s3csiv2.IndexFields(t.Context(), nil, "spec.bucket")
	if err == nil || !strings.Contains(err.Error(), "spec.bucket") {
		t.Fatalf("IndexFields(spec.bucket) = %v, want an error naming the field", err)
	}
}

func TestFieldValue(t *testing.T) {
	a := attachment("x", "node-x", "pv-x")
	for _, field := range s3csiv2.IndexedFields() {
		if _, ok := s3csiv2.FieldValue(a, field); !ok {
			t.Errorf("FieldValue(%s) unknown", field)
		}
	}
	if got, _ := s3csiv2.FieldValue(a, s3csiv2.FieldNodeName); got != "node-x" {
		t.Errorf("FieldValue(nodeName) = %q", got)
	}
}
