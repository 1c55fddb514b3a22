// Package controller implements the CSI Controller service: CreateVolume creates a bucket per
// volume, DeleteVolume deletes the buckets it created and only those.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/s3csi/s3csi/shared/keymutex"
	"github.com/s3csi/s3csi/shared/volumecontext"

	"github.com/s3csi/s3csi/services/csi-controller/internal/metrics"
	"github.com/s3csi/s3csi/services/csi-controller/internal/proof"
	"github.com/s3csi/s3csi/services/csi-controller/internal/s3client"
)

// DefaultCapacityBytes is the capacity reported for a volume whose request names none. A bucket
// has no size; the capacity is only recorded so that a retry can be compared with it.
const DefaultCapacityBytes = 1 << 30

// Config configures a Controller.
type Config struct {
	Endpoint s3client.Endpoint
	// HTTPClient sends every S3 request (see s3client.NewHTTPClient).
	HTTPClient *http.Client
	// DriverCredentials are used when a request carries no provisioner secret.
	DriverCredentials DriverCredentials
	// CredentialsCacheTTL bounds the reuse of a client built for a set of credentials.
	CredentialsCacheTTL time.Duration
	// BucketPrefix starts every bucket name (see BucketName).
	BucketPrefix string
	// OwnershipKeys sign the buckets CreateVolume makes and verify those DeleteVolume deletes.
	// Required.
	OwnershipKeys *proof.Keys
	Metrics       *metrics.Metrics
	// Notifier publishes volume events; nil disables them.
	Notifier Notifier
}

// Controller is the CSI Controller service.
type Controller struct {
	csi.UnimplementedControllerServer

	clients  *clients
	prefix   string
	keys     *proof.Keys
	metrics  *metrics.Metrics
	notifier Notifier
	locks    *keymutex.Mutex
	now      func() time.Time
}

// New returns a Controller; it refuses a Config without ownership keys.
func New(cfg Config) (*Controller, error) {
	if cfg.OwnershipKeys == nil {
		return nil, errors.New("new controller: no ownership keys: DeleteVolume could not tell its buckets from others")
	}
	return &Controller{
		clients:  newClients(cfg.Endpoint, cfg.HTTPClient, cfg.DriverCredentials, cfg.CredentialsCacheTTL),
		prefix:   cfg.BucketPrefix,
		keys:     cfg.OwnershipKeys,
		metrics:  cfg.Metrics,
		notifier: cfg.Notifier,
		locks:    &keymutex.Mutex{},
		now:      time.Now,
	}, nil
}

// ControllerGetCapabilities advertises CREATE_DELETE_VOLUME only: buckets need no attach, no
// snapshot and no expansion.
func (c *Controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{
			Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		}},
	}}}, nil
}

// ValidateVolumeCapabilities confirms the capabilities when the bucket exists and every one is
// supported; an unknown volume is NotFound.
func (c *Controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	if volumecontext.ValidateBucketName(req.GetVolumeId()) != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q does not exist: it is not a bucket name", req.GetVolumeId())
	}
	api, _, err := c.clients.forSecrets(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	ok, err := bucketOps{api: api, metrics: c.metrics}.exists(ctx, req.GetVolumeId())
	if err != nil {
		return nil, s3Status(err, fmt.Sprintf("look up bucket %q", req.GetVolumeId()))
	}
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %q does not exist", req.GetVolumeId())
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// validateCapabilities accepts filesystem volumes in every access mode the node-agent serves.
// A FUSE mount of a bucket can be shared by any number of pods on any number of nodes, so the
// only mode refused is MULTI_NODE_SINGLE_WRITER, whose "single writer" S3 cannot enforce.
func validateCapabilities(caps []*csi.VolumeCapability) error {
	for _, c := range caps {
		if c.GetBlock() != nil {
			return fmt.Errorf("block volumes are not supported: an S3 bucket is mounted as a filesystem")
		}
		if c.GetMount() == nil {
			return fmt.Errorf("a volume capability must have access_type mount")
		}
		switch m := c.GetAccessMode().GetMode(); m {
		case csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
			csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
			csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
			csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
			csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
			csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		default:
			return fmt.Errorf("access mode %s is not supported", m)
		}
	}
	return nil
}

// lockVolume serializes the RPCs on one volume.
//
// Problem: the external-provisioner may send a second CreateVolume for a name while the first
// is still running (after its own timeout); both would race between "bucket missing" and
// "bucket tagged".
// Solution: RPCs on one bucket take its lock, waiting no longer than their context; a call that
// gives up is answered ABORTED, which the sidecar retries.
// Invariant: at most one RPC per bucket runs in this process; across replicas S3 itself
// arbitrates (one CreateBucket wins) and the tags make the loser's outcome identical.
func (c *Controller) lockVolume(ctx context.Context, bucket string) (func(), error) {
	unlock, err := c.locks.LockContext(ctx, bucket)
	if err != nil {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %q is already running; retry later", bucket)
	}
	return unlock, nil
}

func (c *Controller) log(ctx context.Context) logr.Logger {
	return logr.FromContextOrDiscard(ctx)
}
