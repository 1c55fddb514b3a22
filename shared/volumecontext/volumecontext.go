// Package volumecontext defines the volume context of an s3csi volume: the string map that
// CreateVolume returns (dynamic volumes) or that a PersistentVolume's volumeAttributes hold
// (static volumes), and that the kubelet hands back to NodePublishVolume.
//
// The keys are those of the Scality CSI Driver for S3 v2, so existing PersistentVolumes keep
// working unchanged. A volume context is stored in the PV, readable by anyone who can read PVs,
// so it never carries a secret.
package volumecontext

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/s3csi/s3csi/shared/kubenames"
)

// Keys of the volume context.
const (
	// KeyBucketName is the bucket the volume mounts. Required.
	KeyBucketName = "bucketName"
	// KeyAuthenticationSource selects the credentials the mount uses: AuthenticationSourceDriver
	// (the default) or AuthenticationSourceSecret (the volume's nodePublishSecretRef).
	KeyAuthenticationSource = "authenticationSource"
	// KeyDynamicProvisioning is "true" on volumes CreateVolume made; static volumes lack it.
	KeyDynamicProvisioning = "dynamicProvisioning"
	// KeyMountpointPodServiceAccountName is the service account of the volume's Mountpoint Pods.
	KeyMountpointPodServiceAccountName = "mountpointPodServiceAccountName"
	// Resources of the Mountpoint Pod's container, as Kubernetes quantities ("100m", "256Mi").
	KeyMountpointContainerResourcesRequestsCPU    = "mountpointContainerResourcesRequestsCpu"
	KeyMountpointContainerResourcesRequestsMemory = "mountpointContainerResourcesRequestsMemory"
	KeyMountpointContainerResourcesLimitsCPU      = "mountpointContainerResourcesLimitsCpu"
	KeyMountpointContainerResourcesLimitsMemory   = "mountpointContainerResourcesLimitsMemory"
)

// Keys the kubelet adds for NodePublishVolume when the CSIDriver has podInfoOnMount. They are
// part of the request, not of the PV: CreateVolume never returns them.
const (
	KeyPodName               = "csi.storage.k8s.io/pod.name"
	KeyPodNamespace          = "csi.storage.k8s.io/pod.namespace"
	KeyPodUID                = "csi.storage.k8s.io/pod.uid"
	KeyServiceAccountName    = "csi.storage.k8s.io/serviceAccount.name"
	KeyEphemeral             = "csi.storage.k8s.io/ephemeral"
	KeyServiceAccountTokens  = "csi.storage.k8s.io/serviceAccount.tokens" // a secret: never log it
	kubeletKeyPrefix         = "csi.storage.k8s.io/"
	dynamicProvisioningValue = "true"
)

// Values of KeyAuthenticationSource; equal to the AuthenticationSource* constants of the CRD.
const (
	AuthenticationSourceDriver = "driver"
	AuthenticationSourceSecret = "secret"
)

// Context is a parsed, validated volume context.
type Context struct {
	BucketName string
	// AuthenticationSource is AuthenticationSourceDriver or AuthenticationSourceSecret, never "".
	AuthenticationSource string
	DynamicProvisioning  bool
	// MountpointPodServiceAccountName is "" for the default service account.
	MountpointPodServiceAccountName string
	// Resources maps the KeyMountpointContainerResources* keys that are set to their values.
	Resources map[string]resource.Quantity

	// Pod* and ServiceAccountName are the kubelet's podInfoOnMount values ("" when absent).
	PodName, PodNamespace, PodUID, ServiceAccountName string
	// Ignored lists keys this version does not know, sorted. They are kept out of every decision
	// (a newer or older driver may have written them) and may be logged by name.
	Ignored []string
}

// ResourceKeys are the keys holding Mountpoint Pod container resources.
func ResourceKeys() []string {
	return []string{
		KeyMountpointContainerResourcesRequestsCPU, KeyMountpointContainerResourcesRequestsMemory,
		KeyMountpointContainerResourcesLimitsCPU, KeyMountpointContainerResourcesLimitsMemory,
	}
}

// Parse validates a volume context. Every problem is reported at once, naming the key; the
// error never quotes the value of KeyServiceAccountTokens.
func Parse(m map[string]string) (Context, error) {
	c := Context{AuthenticationSource: AuthenticationSourceDriver}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := c.set(k, m[k]); err != nil {
			errs = append(errs, fmt.Errorf("volume context key %q: %w", k, err))
		}
	}
	if _, ok := m[KeyBucketName]; !ok {
		errs = append(errs, fmt.Errorf("volume context key %q is required", KeyBucketName))
	}
	if err := errors.Join(errs...); err != nil {
		return Context{}, fmt.Errorf("parse volume context: %w", err)
	}
	return c, nil
}

func (c *Context) set(k, v string) error {
	switch k {
	case KeyBucketName:
		c.BucketName = v
		return ValidateBucketName(v)
	case KeyAuthenticationSource:
		switch v {
		case "", AuthenticationSourceDriver:
			c.AuthenticationSource = AuthenticationSourceDriver
		case AuthenticationSourceSecret:
			c.AuthenticationSource = v
		default:
			return fmt.Errorf("want %q or %q, got %q", AuthenticationSourceDriver, AuthenticationSourceSecret, v)
		}
	case KeyDynamicProvisioning:
		c.DynamicProvisioning = v == dynamicProvisioningValue
	case KeyMountpointPodServiceAccountName:
		if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
			return fmt.Errorf("invalid service account name %q: %s", v, strings.Join(msgs, "; "))
		}
		c.MountpointPodServiceAccountName = v
	case KeyMountpointContainerResourcesRequestsCPU, KeyMountpointContainerResourcesRequestsMemory,
		KeyMountpointContainerResourcesLimitsCPU, KeyMountpointContainerResourcesLimitsMemory:
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("invalid quantity %q: %w", v, err)
		}
		if q.Sign() < 0 {
			return fmt.Errorf("quantity %q is negative", v)
		}
		if c.Resources == nil {
			c.Resources = map[string]resource.Quantity{}
		}
		c.Resources[k] = q
	case KeyPodName:
		c.PodName = v
		return checkName(kubenames.Pod, v)
	case KeyPodNamespace:
		c.PodNamespace = v
		return checkName(kubenames.Namespace, v)
	case KeyPodUID:
		c.PodUID = v
		return checkName(kubenames.UID, v)
	case KeyServiceAccountName:
		c.ServiceAccountName = v
	default:
		c.Ignored = append(c.Ignored, k)
	}
	return nil
}

// Map is the volume context of c as CreateVolume returns it: only the keys that are set, and
// never the kubelet's podInfoOnMount keys.
func (c Context) Map() map[string]string {
	m := map[string]string{KeyBucketName: c.BucketName}
	if c.AuthenticationSource != "" {
		m[KeyAuthenticationSource] = c.AuthenticationSource
	}
	if c.DynamicProvisioning {
		m[KeyDynamicProvisioning] = dynamicProvisioningValue
	}
	if c.MountpointPodServiceAccountName != "" {
		m[KeyMountpointPodServiceAccountName] = c.MountpointPodServiceAccountName
	}
	for k, q := range c.Resources {
		m[k] = q.String()
	}
	return m
}

// IsKubeletKey reports whether k is in the csi.storage.k8s.io/ namespace the kubelet and the
// CSI sidecars reserve.
func IsKubeletKey(k string) bool {
	return strings.HasPrefix(k, kubeletKeyPrefix)
}

// checkName applies check to a podInfoOnMount value; kubelet sends "" when it has none.
func checkName(check func(string) error, v string) error {
	if v == "" {
		return nil
	}
	return check(v)
}
