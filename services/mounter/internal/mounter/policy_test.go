package mounter

import (
	"slices"
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

// everyOption sets every option that works under the node-agent's policy (its table,
// mountopts.Known), each with the table's example, and every option it ignores; without
// allow-root, which excludes allow-other.
func everyOption(t *testing.T) []string {
	t.Helper()
	var entries []string
	for _, o := range mountopts.Known() {
		if o.Verdict == mountopts.Refused || o.Name == "allow-root" {
			continue
		}
		entry := o.Name
		if o.Example != "" {
			entry += "=" + o.Example
		}
		entries = append(entries, entry)
	}
	if len(entries) < 50 {
		t.Fatalf("the policy knows %d options that work or are ignored, want every one", len(entries))
	}
	return entries
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
			req: request(nodeAgentArgs(t, everyOption(t), "", false), nodeAgentEnv)},
		{name: "what the node-agent sends for a read-only volume of a pod with an fsGroup passes",
			req: request(nodeAgentArgs(t, []string{"uid=1000"}, "3000", true), nodeAgentEnv)},
		{name: "a request without arguments or environment passes", req: request(nil, nil)},
		{name: "an endpoint option is refused", req: request([]string{"--read-only", "--endpoint-url=http://evil.example"}, nodeAgentEnv),
			wantErr: `refuse mount request: the driver's mount-option policy does not allow it: ` +
				`mount option "--endpoint-url=http://evil.example" is not allowed: the endpoint is set by the driver's configuration`},
		{name: "a profile option is refused", req: request([]string{"--profile=x"}, nodeAgentEnv),
			wantErr: `mount option "--profile=x" is not allowed: credentials are provided by the driver`},
		{name: "a CA bundle option is refused", req: request([]string{"--ca-bundle=/evil.pem"}, nil), wantErr: "set it with the chart value `s3.caBundle`"},
		{name: "a log directory option is refused", req: request([]string{"--log-directory=/host"}, nil), wantErr: "logs go to the Mountpoint Pod's output"},
		{name: "an option mount-s3 has but the policy does not list is refused", req: request([]string{"--foreground"}, nil), wantErr: "not allowed"},
		{name: "an unknown environment variable is refused", req: request(nil, []string{"AWS_PROFILE=s3csi", "AWS_CA_BUNDLE=/evil.pem"}),
			wantErr: `environment variable "AWS_CA_BUNDLE" is not allowed: only AWS_ENDPOINT_URL, AWS_PROFILE, AWS_REGION are accepted`},
		{name: "both refusals are named", req: request([]string{"--profile=x"}, []string{"AWS_ACCESS_KEY_ID=k"}),
			wantErr: `remove the option` + "\n" + `environment variable "AWS_ACCESS_KEY_ID" is not allowed`},
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
	withRoot := slices.DeleteFunc(everyOption(t), func(e string) bool { return e == "allow-other" })
	withRoot = append(withRoot, "allow-root")
	for _, entries := range [][]string{everyOption(t), withRoot} {
		for _, readOnly := range []bool{false, true} {
			args := nodeAgentArgs(t, entries, "", readOnly)
			if err := mountopts.CheckArgs(args); err != nil {
				t.Fatalf("the mounter's policy check refuses %q (read-only %t): %v", args, readOnly, err)
			}
			o, err := mountargs.ParseMountOptions(args)
			if err != nil {
				t.Fatalf("the mounter's parser refuses %q (read-only %t): %v", args, readOnly, err)
			}
			if ignored := o.Ignored(); len(ignored) != 0 {
				t.Fatalf("the node-agent sends %q, which the mounter ignores: %v", args, ignored)
			}
		}
	}
}

// Each option's bounds are the parser's: a value the policy accepts parses, at either end.
func TestThePolicyAcceptsOnlyValuesTheMounterParses(t *testing.T) {
	for _, o := range mountopts.Known() {
		if o.Verdict != mountopts.Works || o.Example == "" {
			continue
		}
		for _, v := range []string{"0", "1", "15", "16", "65535", "65536", "5242879", "5242880", "4294967295",
			"4294967296", "5368709120", "5368709121", "18446744073709551615", "a", "/a/", "a/", "7777", "0777", o.Example} {
			entries := []string{o.Name + "=" + v}
			if o.Name == "max-cache-size" {
				entries = append(entries, "cache=data")
			}
			if o.Name == "sse-kms-key-id" {
				entries = append(entries, "sse=aws:kms")
			}
			p, err := mountopts.Parse(entries)
			if err != nil {
				continue
			}
			if _, err := mountargs.ParseMountOptions(p.Args()); err != nil {
				t.Errorf("the policy accepts %q, the mounter's parser refuses %q: %v", entries, p.Args(), err)
			}
		}
	}
}

// The options the policy ignores are mount-s3's (all but help and version, which the Scality
// driver dropped): the mounter's command line takes them too, and says they have no effect.
func TestTheMounterParsesTheOptionsThePolicyIgnores(t *testing.T) {
	for _, o := range mountopts.Known() {
		if o.Verdict != mountopts.Ignored || o.Name == "help" || o.Name == "version" {
			continue
		}
		arg := "--" + o.Name
		if o.Example != "" {
			arg += "=" + o.Example
		}
		if _, err := mountargs.Parse([]string{arg, "bucket-1", "/mnt"}); err != nil {
			t.Errorf("s3csi-mounter %s: %v", arg, err)
		}
	}
}
