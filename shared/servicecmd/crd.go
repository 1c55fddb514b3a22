package servicecmd

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/openapi"
	"sigs.k8s.io/controller-runtime/pkg/client"

	s3csiv2 "github.com/s3csi/s3csi/shared/api/v2"
)

// CRDPatience is how long CheckCRD waits for an outdated CRD to be upgraded (by the janitor, at
// its start: s3csiv2.ApplyCRD) before it fails: long enough for a chart upgrade to roll the
// janitor, short enough that a CRD nothing upgrades fails the pod while its operator watches.
const CRDPatience = 2 * time.Minute

// CheckCRD returns nil once the API server confirms that the MountpointS3PodAttachment CRD is
// the one the services need (s3csiv2.CheckCRD), and the error naming the fix when it is still
// outdated after patience. While the server cannot answer, or the CRD is outdated, it retries
// every retry, logging once each; it returns nil when ctx ends. A service runs it beside its
// work and stops on its error: an outdated CRD then fails the service at start with one precise
// message, not every lookup later with the server's "field label not supported", and never
// lets it write attachments whose fields the server drops.
func CheckCRD(ctx context.Context, r client.Reader, oa openapi.Client, retry, patience time.Duration) error {
	log := logr.FromContextOrDiscard(ctx)
	deadline := time.Now().Add(patience)
	loggedUnreachable, loggedOutdated := false, false
	for {
		err := s3csiv2.CheckCRD(ctx, r, oa)
		switch {
		case err == nil:
			if loggedOutdated {
				log.Info("The attachment CRD is up to date")
			}
			return nil
		case errors.Is(err, s3csiv2.ErrCRDOutdated):
			if !time.Now().Before(deadline) {
				return err
			}
			if !loggedOutdated {
				log.Info("The attachment CRD is outdated; waiting for it to be upgraded", "error", err.Error(), "wait", patience.String())
				loggedOutdated = true
			}
		default:
			if !loggedUnreachable {
				log.Info("Cannot check the attachment CRD yet; retrying", "error", err.Error())
				loggedUnreachable = true
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}
