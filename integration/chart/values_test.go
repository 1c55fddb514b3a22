package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadValuesAreRefused checks that values.schema.json (and the templates' required checks)
// make `helm template` fail with a message naming the field to fix.
func TestBadValuesAreRefused(t *testing.T) {
	const endpoint = "s3:\n  endpointUrl: https://s3.example.com\n"
	cases := []struct {
		name      string
		values    string
		wantInErr []string
	}{
		{"a missing S3 endpoint is refused naming s3.endpointUrl", "{}\n", []string{"endpointUrl"}},
		{"an S3 endpoint without a scheme is refused", "s3:\n  endpointUrl: s3.example.com\n", []string{"/s3/endpointUrl"}},
		{"an S3 endpoint with a space is refused", "s3:\n  endpointUrl: https://s3 example.com\n", []string{"/s3/endpointUrl"}},
		{"an unknown top-level key is refused", endpoint + "controllr:\n  replicas: 2\n", []string{"controllr"}},
		{"zero pod-reconciler replicas are refused", endpoint + "podReconciler:\n  replicas: 0\n", []string{"/podReconciler/replicas"}},
		{"zero NATS replicas are refused", endpoint + "nats:\n  replicas: 0\n", []string{"/nats/replicas"}},
		{"seven stream replicas are refused", endpoint + "nats:\n  streamReplicas: 7\n", []string{"/nats/streamReplicas"}},
		{"more stream replicas than the chart's NATS servers are refused", endpoint + "nats:\n  replicas: 1\n  streamReplicas: 3\n", []string{"nats.streamReplicas 3", "nats.replicas"}},
		{"replicas given as text are refused", endpoint + "janitor:\n  replicas: two\n", []string{"/janitor/replicas"}},
		{"an invalid pull policy is refused", endpoint + "image:\n  pullPolicy: Sometimes\n", []string{"/image/pullPolicy"}},
		{"the Scality v2 single image.repository is refused", endpoint + "image:\n  repository: ghcr.io/scality/mountpoint-s3-csi-driver\n", []string{"image.repository: s3csi runs seven images", "image.registry", "image.repositories"}},
		{"a NATS URL without a scheme is refused", endpoint + "nats:\n  external:\n    url: nats.example.com:4222\n", []string{"/nats/external/url"}},
		{"an external NATS with authentication but no Secret of passwords is refused naming nats.auth.existingSecret",
			endpoint + "nats:\n  external:\n    url: nats://nats.example.com:4222\n", []string{"nats.auth.existingSecret"}},
		{"a misspelled NATS auth value is refused", endpoint + "nats:\n  auth:\n    existingSecrets: x\n", []string{"existingSecrets"}},
		{"a log level above 10 is refused", endpoint + "node:\n  logLevel: 11\n", []string{"/node/logLevel"}},
		{"a resume wait that is not a duration is refused", endpoint + "node:\n  resumeWait: soon\n", []string{"/node/resumeWait"}},
		{"an unknown log format is refused", endpoint + "logFormat: xml\n", []string{"/logFormat"}},
		{"an unknown fsGroupPolicy is refused", endpoint + "csiDriver:\n  fsGroupPolicy: Always\n", []string{"/csiDriver/fsGroupPolicy"}},
		{"a Mountpoint namespace that is not a DNS label is refused", endpoint + "mountpointPod:\n  namespace: Mount_S3\n", []string{"/mountpointPod/namespace"}},
		{"a Mountpoint namespace that is the release namespace is refused while the admission policy is on",
			endpoint + "mountpointPod:\n  namespace: " + releaseNamespace + "\n", []string{"mountpointPod.namespace", "mountpointPod.admissionPolicy.enabled=false"}},
		{"a misspelled admission policy value is refused", endpoint + "mountpointPod:\n  admissionPolicy:\n    enable: false\n", []string{"enable"}},
		{"a Mountpoint Pod grace period of zero is refused", endpoint + "mountpointPod:\n  terminationGracePeriodSeconds: 0\n", []string{"/mountpointPod/terminationGracePeriodSeconds"}},
		{"a bucket prefix with capitals is refused", endpoint + "controller:\n  bucketPrefix: CSI-\n", []string{"/controller/bucketPrefix"}},
		{"an ownership keys Secret name with capitals is refused", endpoint + "controller:\n  ownershipKeys:\n    existingSecret: My_Keys\n", []string{"/controller/ownershipKeys/existingSecret"}},
		{"a misspelled ownership keys value is refused", endpoint + "controller:\n  ownershipKeys:\n    secret: keys\n", []string{"secret"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(file, []byte(tc.values), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := helmTemplate(t, "--values", file)
			if err == nil {
				t.Fatalf("helm template accepted the values; rendered %d bytes", len(out))
			}
			for _, want := range tc.wantInErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not name %q:\n%v", want, err)
				}
			}
		})
	}
}
