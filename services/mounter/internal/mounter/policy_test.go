package mounter

import (
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/mountopts"

	"github.com/s3csi/s3csi/services/mounter/internal/mountargs"
)

// nodeAgentEnv is what the node-agent sends every mounter (services/node-agent/internal/csi,
// Server.env).
var nodeAgentEnv = []string{"AWS_PROFILE=s3csi", "AWS_REGION=us-east-1", "AWS_ENDPOINT_URL=https://ring.example"}

// everyOption sets every option the node-agent's policy lets a volume set.
var everyOption = []string{
	"allow-delete", "allow-overwrite", "allow-other", "requester-pays", "debug", "abort-on-signal", "no-sign-request",
	"uid=1000", "gid=2000", "dir-mode=750", "file-mode=640", "prefix=data/", "region=eu-west-1",
	"metadata-ttl=indefinite", "negative-metadata-ttl=60", "max-threads=16", "part-size=8388608",
	"read-part-size=8388608", "write-part-size=8388608", "max-cache-size=1024", "max-memory-target=512", "memory-target=256",
	"sse=aws:kms", "sse-kms-key-id=key-1", "upload-checksums=off", "expected-bucket-owner=123456789012", "cache=data",
}

// nodeAgentArgs renders a volume's mount options as the node-agent does: the policy, the
// volume mount group, the driver's defaults.
func nodeAgentArgs(t *testing.T, entries []string, group string, readOnly bool) []string {
	t.Helper()
	o, err := mountopts.Parse(entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.ApplyVolumeMountGroup(group); err != nil {
		t.Fatal(err)
	}
	o.ApplyDefaults(readOnly)
	return o.Args()
}

func TestCheckPolicy(t *testing.T) {
	request := func(args, env []string) *handshake.Request {
		return &handshake.Request{Bucket: "b", MaxRead: mount.FUSEMaxRead, Args: args, Env: env}
	}
	for _, tt := range []struct {
		name    string
		req     *handshake.Request
		wantErr string
	}{
		{name: "what the node-agent sends for a volume without options passes",
			req: request(nodeAgentArgs(t, nil, "", false), nodeAgentEnv)},
		{name: "what the node-agent sends for a volume with every allowed option passes",
			req: request(nodeAgentArgs(t, everyOption, "", false), nodeAgentEnv)},
		{name: "what the node-agent sends for a read-only volume of a pod with an fsGroup passes",
			req: request(nodeAgentArgs(t, []string{"uid=1000"}, "3000", true), nodeAgentEnv)},
		{name: "a request without arguments or environment passes", req: request(nil, nil)},
		{name: "an endpoint option is refused", req: request([]string{"--read-only", "--endpoint-url=http://evil.example"}, nodeAgentEnv),
			wantErr: `refuse mount request: the driver's mount-option policy does not allow it: ` +
				`mount option "--endpoint-url=http://evil.example" is not allowed: the endpoint is set by the driver's configuration`},
		{name: "a profile option is refused", req: request([]string{"--profile=x"}, nodeAgentEnv),
			wantErr: `mount option "--profile=x" is not allowed: credentials are provided by the driver`},
		{name: "a CA bundle option is refused", req: request([]string{"--ca-bundle=/evil.pem"}, nil), wantErr: "TLS trust is set by the driver"},
		{name: "a log directory option is refused", req: request([]string{"--log-directory=/host"}, nil), wantErr: "logs go to the Mountpoint Pod's output"},
		{name: "an option mount-s3 has but the policy does not list is refused", req: request([]string{"--foreground"}, nil), wantErr: "not allowed"},
		{name: "an unknown environment variable is refused", req: request(nil, []string{"AWS_PROFILE=s3csi", "AWS_CA_BUNDLE=/evil.pem"}),
			wantErr: `environment variable "AWS_CA_BUNDLE" is not allowed: only AWS_ENDPOINT_URL, AWS_PROFILE, AWS_REGION are accepted`},
		{name: "both refusals are named", req: request([]string{"--profile=x"}, []string{"AWS_ACCESS_KEY_ID=k"}),
			wantErr: `credentials are provided by the driver` + "\n" + `environment variable "AWS_ACCESS_KEY_ID" is not allowed`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkPolicy(tt.req)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("checkPolicy(args %q, env %q) = %v, want nil", tt.req.Args, tt.req.Env, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("checkPolicy(args %q, env %q) = %v, want an error containing %q", tt.req.Args, tt.req.Env, err, tt.wantErr)
			}
		})
	}
}

// The policy is the node-agent's, the parser the mounter's: every option the one lets through,
// the other must parse, or a mount the node-agent accepted fails in the Mountpoint Pod.
func TestTheMounterParsesEveryOptionThePolicyLetsThrough(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		args := nodeAgentArgs(t, everyOption, "", readOnly)
		if _, err := mountargs.ParseMountOptions(args); err != nil {
			t.Fatalf("the mounter's parser refuses %q (read-only %t): %v", args, readOnly, err)
		}
	}
}
