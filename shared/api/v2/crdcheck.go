package v2

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrSelectableFieldsMissing is returned by CheckSelectableFields when the cluster's CRD does not
// let the API server filter attachments on SelectableFields.
var ErrSelectableFieldsMissing = errors.New("the MountpointS3PodAttachment CRD in the cluster lacks selectableFields")

// CheckSelectableFields asks the API server for attachments filtered on every field of
// SelectableFields (at most one, for no attachment matches) and returns an error wrapping
// ErrSelectableFieldsMissing, which names the fix, when the server refuses the filter: the CRD
// predates them (Helm installs CRDs but never upgrades them) or the server is older than 1.32.
// Without this check a service would start and then fail every lookup with the server's
// "field label not supported". Other errors (an unreachable server) are returned as they are.
func CheckSelectableFields(ctx context.Context, r client.Reader) error {
	terms := make([]fields.Selector, 0, len(SelectableFields))
	for _, f := range SelectableFields {
		terms = append(terms, fields.OneTermEqualSelector(f, "s3csi-startup-check"))
	}
	var list MountpointS3PodAttachmentList
	err := r.List(ctx, &list, client.MatchingFieldsSelector{Selector: fields.AndSelectors(terms...)}, client.Limit(1))
	switch {
	case err == nil:
		return nil
	case apierrors.IsBadRequest(err):
		return fmt.Errorf("%w (%s; the server said: %w). Helm installs CRDs but does not upgrade them: "+
			"apply the chart's CRDs (kubectl apply --server-side -f charts/s3csi/crds/) on Kubernetes 1.32 or newer, "+
			"then restart this pod", ErrSelectableFieldsMissing, strings.Join(SelectableFields, ", "), err)
	default:
		return fmt.Errorf("check the MountpointS3PodAttachment CRD's selectable fields: %w", err)
	}
}
