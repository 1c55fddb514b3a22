package servicecmd

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// CheckCRD returns nil once the API server confirms that the MountpointS3PodAttachment CRD
// declares the selectable fields the services filter on, and the error naming the fix when it
// does not (s3csiv2.CheckSelectableFields). While the server cannot answer it retries every
// retry, logging once; it returns nil when ctx ends. A service runs it beside its work and stops
// on its error: an outdated CRD then fails the service at start with one precise message, not
// every lookup later with the server's "field label not supported".
func CheckCRD(ctx context.Context, r client.Reader, retry time.Duration) error {
	logged := false
	for {
		err := s3csiv2.CheckSelectableFields(ctx, r)
		if err == nil || errors.Is(err, s3csiv2.ErrSelectableFieldsMissing) {
			return err
		}
		if !logged {
			logr.FromContextOrDiscard(ctx).Info("Cannot check the attachment CRD yet; retrying", "error", err.Error())
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}
