// Package options holds the node-agent's command-line options: defaults, flags and the checks
// that reject a bad combination before anything starts.
package options

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mppod"
	"github.com/s3csi/s3csi/shared/servicecmd"

	"github.com/s3csi/s3csi/services/node-agent/internal/attach"
	"github.com/s3csi/s3csi/services/node-agent/internal/cleanup"
	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
	"github.com/s3csi/s3csi/services/node-agent/internal/health"
)

// Options configures one node-agent process.
type Options struct {
	// CommonOptions are --admin-address, --nats-url (env NATS_URL), --kubeconfig and the
	// logging flags, shared by every service.
	servicecmd.CommonOptions
	// KubeAPIOptions are --kube-api-qps and --kube-api-burst, by default kubelet's own (50 and
	// 100): like kubelet's, the node-agent's requests grow with the pods starting on its node.
	servicecmd.KubeAPIOptions
	// NodeName is the node this agent serves; it filters which pods, attachments and events are
	// its own. Defaults to $NODE_NAME, set from the downward API (spec.nodeName). Required.
	NodeName string
	// KubeletDir is the kubelet's root directory on the host, under which pod volumes and the
	// plugin's source mounts live.
	KubeletDir string
	// CSIEndpoint is the unix socket the kubelet dials.
	CSIEndpoint string
	// MountpointNamespace is the namespace of the Mountpoint Pods. Defaults to
	// $MOUNTPOINT_NAMESPACE, else mount-s3.
	MountpointNamespace string
	// MountpointImage is the image the pod-reconciler gives Mountpoint Pods (its
	// --mountpoint-image); a pod of a Mountpoint Pod's name whose image is of another repository
	// gets no mount and no key. Empty (the default, unless $MOUNTPOINT_IMAGE is set) leaves the
	// image unchecked; every other field that makes a pod a Mountpoint Pod is checked anyway.
	MountpointImage string
	// AttachmentRereadPeriod is the fallback period at which a waiting NodePublishVolume
	// re-reads the attachments when no attachment.assigned event wakes it.
	AttachmentRereadPeriod time.Duration
	// CleanupPeriod is the period of the sweep that unmounts sources no Mountpoint Pod serves;
	// the needs-unmount event makes it immediate.
	CleanupPeriod time.Duration
	// HealthPeriod is how often every source mount is checked for a dead FUSE connection: a
	// crashed mounter is reported (mount.failed, Warning Events) within it.
	HealthPeriod time.Duration
	// ResumeWait is how long a source whose mounter ended waits for the next mounter to receive
	// its FUSE connection (a Mountpoint Pod replaced, its image pulled).
	ResumeWait time.Duration
	// ReplayWait is how long the mounter that received the connection may take to answer, the
	// replay of what the kernel holds included.
	ReplayWait time.Duration
	// LegacyTokenFile is the driver's web identity token, copied on republish to where mount-s3
	// processes of the v1 (systemd) mounter read it. Defaults to $AWS_WEB_IDENTITY_TOKEN_FILE.
	LegacyTokenFile string
	// S3EndpointURL is the S3 endpoint every Mountpoint Pod uses. Defaults to $AWS_ENDPOINT_URL.
	S3EndpointURL string
	// S3PathStyle addresses buckets as <endpoint>/<bucket>; on by default, as on-premises S3
	// endpoints need it (the csi-controller has the same default).
	S3PathStyle bool
	// S3Region is the S3 region. Defaults to $AWS_REGION, else us-east-1.
	S3Region string
	// S3CABundle is a PEM file of the CAs trusted for the S3 endpoint's certificate in addition
	// to the system roots (the chart's s3.caBundle). It is read at each mount and sent to the
	// Mountpoint Pod's mounter with the mount request, so a new CA needs no restart. Empty: none.
	S3CABundle string
	// RegisterWithKubelet serves the kubelet plugin registration socket in
	// <kubelet-dir>/plugins_registry (no node-driver-registrar sidecar needed).
	RegisterWithKubelet bool
	// RemoveStartupTaint removes the node's startup taint once the driver is registered.
	RemoveStartupTaint bool
	// DriverCredentials are the driver-level S3 keys, from $AWS_ACCESS_KEY_ID,
	// $AWS_SECRET_ACCESS_KEY and $AWS_SESSION_TOKEN only: never flags, which show in process
	// listings.
	DriverCredentials credentials.Static
}

// Defaults of the API client's rate limit: kubelet's.
const (
	DefaultKubeAPIQPS   = 50
	DefaultKubeAPIBurst = 100
)

// New returns the defaults, taking downward-API and environment values (NODE_NAME, NATS_URL)
// from the environment.
func New() *Options {
	return &Options{
		CommonOptions:  servicecmd.NewCommonOptions(":8083"),
		KubeAPIOptions: servicecmd.KubeAPIOptions{KubeAPIQPS: DefaultKubeAPIQPS, KubeAPIBurst: DefaultKubeAPIBurst},
		NodeName:       os.Getenv("NODE_NAME"),
		KubeletDir:     "/var/lib/kubelet",
		CSIEndpoint:    "unix:///var/lib/kubelet/plugins/s3.csi.scality.com/csi.sock",

		MountpointNamespace:    envOr("MOUNTPOINT_NAMESPACE", mppod.DefaultNamespace),
		MountpointImage:        os.Getenv("MOUNTPOINT_IMAGE"),
		AttachmentRereadPeriod: attach.DefaultFallback,
		CleanupPeriod:          cleanup.DefaultPeriod,
		HealthPeriod:           health.DefaultPeriod,
		LegacyTokenFile:        os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE"),
		S3EndpointURL:          os.Getenv("AWS_ENDPOINT_URL"),
		S3PathStyle:            true,
		S3Region:               envOr("AWS_REGION", "us-east-1"),
		RegisterWithKubelet:    true,
		ResumeWait:             handshake.DefaultResumeWait,
		ReplayWait:             handshake.DefaultReplayWait,
		RemoveStartupTaint:     true,
		DriverCredentials: credentials.Static{
			AccessKeyID:     os.Getenv("AWS_ACCESS_KEY_ID"),
			SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
			SessionToken:    os.Getenv("AWS_SESSION_TOKEN"),
		},
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// AddFlags registers the options on fs, with the current values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.CommonOptions.AddFlags(fs)
	o.KubeAPIOptions.AddFlags(fs)
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "name of the node this agent serves; required (env NODE_NAME)")
	fs.StringVar(&o.KubeletDir, "kubelet-dir", o.KubeletDir, "kubelet root directory on the host")
	fs.StringVar(&o.CSIEndpoint, "csi-endpoint", o.CSIEndpoint, "CSI gRPC endpoint, unix:///absolute/path")
	fs.StringVar(&o.MountpointNamespace, "mountpoint-namespace", o.MountpointNamespace, "namespace of the Mountpoint Pods (env MOUNTPOINT_NAMESPACE)")
	fs.StringVar(&o.MountpointImage, "mountpoint-image", o.MountpointImage,
		"image of the Mountpoint Pods, as the pod-reconciler sets it; a pod of another image repository gets no mount (env MOUNTPOINT_IMAGE; empty: not checked)")
	fs.DurationVar(&o.AttachmentRereadPeriod, "attachment-reread-period", o.AttachmentRereadPeriod,
		"fallback period of the attachment re-read while NodePublishVolume waits, when no event arrives")
	fs.DurationVar(&o.CleanupPeriod, "cleanup-period", o.CleanupPeriod, "period of the sweep that unmounts sources no Mountpoint Pod serves")
	fs.StringVar(&o.LegacyTokenFile, "legacy-token-file", o.LegacyTokenFile,
		"web identity token refreshed on republish for mounts of the v1 systemd mounter (env AWS_WEB_IDENTITY_TOKEN_FILE)")
	fs.DurationVar(&o.HealthPeriod, "health-period", o.HealthPeriod, "how often source mounts are checked for a dead FUSE connection")
	fs.DurationVar(&o.ResumeWait, "resume-wait", o.ResumeWait,
		"how long a mount whose mounter ended waits for the next mounter to receive it before its workloads get ENOTCONN")
	fs.DurationVar(&o.ReplayWait, "replay-wait", o.ReplayWait,
		"how long the mounter that received a mount may take to replay what the kernel holds and answer")
	fs.StringVar(&o.S3EndpointURL, "s3-endpoint-url", o.S3EndpointURL, "S3 endpoint of every Mountpoint Pod (env AWS_ENDPOINT_URL)")
	fs.BoolVar(&o.S3PathStyle, "s3-path-style", o.S3PathStyle, "address buckets as <endpoint>/<bucket> rather than <bucket>.<host>")
	fs.StringVar(&o.S3Region, "s3-region", o.S3Region, "S3 region (env AWS_REGION)")
	fs.StringVar(&o.S3CABundle, "s3-ca-bundle", o.S3CABundle,
		"PEM file of extra CAs trusted for the S3 endpoint's certificate, read at each mount and sent to the Mountpoint Pod's mounter")
	fs.BoolVar(&o.RegisterWithKubelet, "register-with-kubelet", o.RegisterWithKubelet, "serve the kubelet plugin registration socket")
	fs.BoolVar(&o.RemoveStartupTaint, "remove-startup-taint", o.RemoveStartupTaint,
		"remove the node's s3.csi.scality.com/agent-not-ready taint once the driver is registered")
}

// Validate reports every invalid option at once, naming the flag to fix.
func (o *Options) Validate() error {
	errs := []error{o.CommonOptions.Validate()}
	errs = append(errs, o.KubeAPIOptions.Validate()...)
	switch {
	case o.NodeName == "":
		errs = append(errs, errors.New("--node-name is required: set it, or NODE_NAME from the downward API (fieldRef spec.nodeName)"))
	case len(validation.IsDNS1123Subdomain(o.NodeName)) > 0:
		errs = append(errs, fmt.Errorf("--node-name %q is not a node name: %s",
			o.NodeName, strings.Join(validation.IsDNS1123Subdomain(o.NodeName), "; ")))
	}
	if !path.IsAbs(o.KubeletDir) {
		errs = append(errs, fmt.Errorf("--kubelet-dir must be an absolute path, got %q", o.KubeletDir))
	}
	if err := validateUnixEndpoint(o.CSIEndpoint); err != nil {
		errs = append(errs, fmt.Errorf("--csi-endpoint: %w", err))
	}
	if errs2 := validation.IsDNS1123Label(o.MountpointNamespace); len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("--mountpoint-namespace %q is not a namespace name: %s", o.MountpointNamespace, strings.Join(errs2, "; ")))
	}
	if strings.ContainsAny(o.MountpointImage, " \t\n") {
		errs = append(errs, fmt.Errorf("--mountpoint-image %q is not an image reference", o.MountpointImage))
	}
	if o.AttachmentRereadPeriod < 100*time.Millisecond || o.AttachmentRereadPeriod > time.Minute {
		errs = append(errs, fmt.Errorf("--attachment-reread-period must be from 100ms to 1m, got %s", o.AttachmentRereadPeriod))
	}
	if o.HealthPeriod < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--health-period must be at least 100ms, got %s", o.HealthPeriod))
	}
	if o.ResumeWait < time.Second {
		errs = append(errs, fmt.Errorf("--resume-wait must be at least 1s, got %s", o.ResumeWait))
	}
	if o.ReplayWait < time.Second {
		errs = append(errs, fmt.Errorf("--replay-wait must be at least 1s, got %s", o.ReplayWait))
	}
	if o.CleanupPeriod < time.Second {
		errs = append(errs, fmt.Errorf("--cleanup-period must be at least 1s, got %s", o.CleanupPeriod))
	}
	if err := validateEndpointURL(o.S3EndpointURL); err != nil {
		errs = append(errs, fmt.Errorf("--s3-endpoint-url: %w", err))
	}
	if o.S3Region == "" {
		errs = append(errs, errors.New("--s3-region must not be empty"))
	}
	if o.S3CABundle != "" && !path.IsAbs(o.S3CABundle) {
		errs = append(errs, fmt.Errorf("--s3-ca-bundle must be an absolute path, got %q", o.S3CABundle))
	}
	if err := o.DriverCredentials.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("driver credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: %w", err))
	}
	return errors.Join(errs...)
}

// validateUnixEndpoint accepts unix:///absolute/path, the only transport the kubelet uses for
// CSI plugins.
func validateUnixEndpoint(endpoint string) error {
	p, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok || !path.IsAbs(p) || path.Clean(p) == "/" {
		return fmt.Errorf("want unix:///absolute/path/to.sock, got %q", endpoint)
	}
	return nil
}

// validateEndpointURL accepts an empty value (the S3 client's default) or an http(s) URL.
func validateEndpointURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want http://host[:port] or https://host[:port], got %q", raw)
	}
	return nil
}
