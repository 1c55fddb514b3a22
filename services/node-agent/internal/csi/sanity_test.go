package csi_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/s3csi/s3csi/shared/mount"
	"github.com/s3csi/s3csi/shared/testenv"

	"github.com/s3csi/s3csi/services/node-agent/internal/credentials"
)

// allowedSkip matches the only reasons a selected spec may skip itself: an RPC or capability
// the node service does not advertise (no staging, no expansion, no NodeGetVolumeHealth,
// no SINGLE_NODE_MULTI_WRITER). Any other skip, e.g. of the idempotency case or of "should
// remove target path", fails the test.
var allowedSkip = regexp.MustCompile(`^((NodeStageVolume|NodeUnstageVolume|NodeExpandVolume|NodeGetVolumeHealth|NodeGetStorageHealth) not supported|Service does not have single node multi writer capability)$`)

// TestCSISanity runs csi-sanity's Identity and Node specs, idempotency included, against the
// node-agent's CSI server mounting real buckets: volumes come from the real s3csi-controller
// binary (CreateVolume makes a bucket on versitygw), and each publish hands /dev/fuse to a
// mounter child process running the real s3fs engine against the same versitygw.
//
// Sanity cannot talk to the node service directly: it publishes to <TargetPath>/target, which
// the node service refuses because it is not a kubelet target path, and it never creates the
// attachment and Mountpoint Pod the node service waits for. A kubeletAdapter (see its doc)
// stands between them and translates each request into the one kubelet would send; sanity's
// CheckPath looks through the same translation, so "should remove target path" checks the
// real target.
func TestCSISanity(t *testing.T) {
	srv := testenv.StartS3(t)
	controllerSocket := startController(t, srv)
	n := startNode(t, nodeOptions{fallback: 100 * time.Millisecond, s3: srv,
		driverCreds: credentials.Static{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}})
	conn, err := grpc.NewClient("unix://"+controllerSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	adapterSocket := filepath.Join(t.TempDir(), "kubelet-adapter.sock")
	adapter := startKubeletAdapter(t, n, adapterSocket, csipb.NewIdentityClient(conn))

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + adapterSocket
	cfg.ControllerAddress = "unix://" + controllerSocket
	cfg.TargetPath = filepath.Join(t.TempDir(), "target")
	cfg.StagingPath = filepath.Join(t.TempDir(), "staging")
	cfg.IdempotentCount = 10
	cfg.CheckPath = adapter.checkPath
	sc := sanity.GinkgoTest(&cfg)

	var skipped, unexpected, passed []string
	ginkgo.ReportAfterEach(func(r types.SpecReport) {
		text := r.FullText()
		if !strings.HasPrefix(text, "Identity Service") && !strings.HasPrefix(text, "Node Service") {
			return // not selected: the Controller specs belong to the csi-controller
		}
		switch r.State {
		case types.SpecStateSkipped:
			if !allowedSkip.MatchString(r.Failure.Message) {
				unexpected = append(unexpected, text+": "+r.Failure.Message)
			}
			skipped = append(skipped, text+": "+r.Failure.Message)
		case types.SpecStatePending:
			unexpected = append(unexpected, text+": pending")
		case types.SpecStatePassed:
			passed = append(passed, text)
		}
	})
	suite, reporter := ginkgo.GinkgoConfiguration()
	suite.FocusStrings = []string{`sanity Identity Service`, `sanity Node Service`}
	suite.Timeout = 3 * time.Minute
	reporter.Succinct = true
	gomega.RegisterFailHandler(ginkgo.Fail)
	ok := ginkgo.RunSpecs(t, "node-agent sanity", suite, reporter)
	sc.Finalize()
	for _, err := range adapter.failures() {
		t.Errorf("kubelet adapter: %v", err)
	}
	if !ok {
		t.Fatal("csi-sanity failed")
	}

	t.Logf("%d sanity specs passed, %d skipped themselves:\n  %s", len(passed), len(skipped), strings.Join(skipped, "\n  "))
	for _, s := range unexpected {
		t.Errorf("a spec that must run was skipped: %s", s)
	}
	for _, want := range []string{"Node Service should work", "Node Service should be idempotent", "should remove target path"} {
		found := false
		for _, p := range passed {
			found = found || strings.Contains(p, want)
		}
		if !found {
			t.Errorf("no passed spec mentions %q", want)
		}
	}
	assertNoTargetLeft(t, n)
}

// assertNoTargetLeft checks that every target sanity published was unpublished: no mount and
// no dir remain under the workload pods' volume dirs (sources stay: they are the cleanup's).
func assertNoTargetLeft(t *testing.T, n *node) {
	t.Helper()
	table, err := mount.ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	pods := filepath.Join(n.kubelet.Root, "pods") + string(filepath.Separator)
	for _, e := range table {
		if strings.HasPrefix(e.MountPoint, pods) {
			t.Errorf("%s is still mounted after sanity's cleanup", e.MountPoint)
		}
	}
	targets, err := filepath.Glob(filepath.Join(pods, "*", "volumes", "kubernetes.io~csi", "*", "mount"))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range targets {
		t.Errorf("target dir %s is left after sanity's cleanup", target)
	}
}

// startController builds the real s3csi-controller and runs it against srv with the S3 root
// credentials as its driver credentials (a --credentials-dir, as a mounted Secret provides
// them) and an ownership key; it returns the path of its CSI socket once /readyz answers.
func startController(t *testing.T, srv *testenv.S3) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "s3csi-controller")
	if err := testenv.BuildModuleBinaryE(t.Context(), "services/csi-controller", "./cmd/s3csi-controller", bin); err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	for name, value := range map[string]string{"access_key_id": srv.AccessKey, "secret_access_key": srv.SecretKey} {
		if err := os.WriteFile(filepath.Join(creds, name), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keys := t.TempDir()
	if err := os.WriteFile(filepath.Join(keys, "key"), []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "controller.sock")
	p := testenv.StartProcess(t, bin, "--admin-address=127.0.0.1:0", "--csi-endpoint=unix://"+socket,
		"--s3-endpoint="+srv.Endpoint, "--s3-region="+srv.Region, "--credentials-dir="+creds, "--nats-url=",
		"--ownership-keys-dir="+keys)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("csi-controller output:\n" + p.Output())
		}
	})
	testenv.WaitHealthy(t, "http://"+p.AdminAddress(t)+"/readyz")
	return socket
}
