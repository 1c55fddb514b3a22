package csiserver_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"github.com/s3csi/s3csi/shared/testenv"
)

// allowedSkip matches the only reasons a selected spec may skip itself: an RPC the
// csi-controller does not advertise (a bucket has no capacity to report, no snapshot, no clone,
// no attach). Any other skip, e.g. of an idempotency or maximum-length case (the Scality v2
// driver skipped those), fails the test.
var allowedSkip = regexp.MustCompile(`^(GetCapacity|ListVolumes|Snapshot|Volume Cloning|Modify [Vv]olume|ControllerPublishVolume|Controller Publish, UnpublishVolume|ControllerUnpublishVolume) not supported$`)

// TestCSISanity runs csi-sanity's Identity and Controller specs against the real server and
// versitygw. The Node specs belong to the node-agent and are not selected (the csi-controller
// does not serve the Node service; see nodeStandIn for what sanity's cleanup needs of it). Specs that skip themselves because a capability is not
// advertised (snapshots, cloning, ListVolumes, GetCapacity, ControllerPublish) are listed; a
// skipped idempotency or maximum-length case fails the test.
func TestCSISanity(t *testing.T) {
	srv := testenv.StartS3(t)
	socket := filepath.Join(t.TempDir(), "csi.sock")
	h := startServer(t, srv, "unix://"+socket, testr.New(t))
	defer h.stop(t)

	standInSocket := filepath.Join(t.TempDir(), "node.sock")
	stopStandIn := startNodeStandIn(t, standInSocket, dial(t, socket))
	defer stopStandIn()

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + standInSocket
	cfg.ControllerAddress = "unix://" + socket
	cfg.TargetPath = filepath.Join(t.TempDir(), "target")
	cfg.StagingPath = filepath.Join(t.TempDir(), "staging")
	cfg.IdempotentCount = 10
	sc := sanity.GinkgoTest(&cfg)

	var skipped, unexpected, passed []string
	ginkgo.ReportAfterEach(func(r types.SpecReport) {
		text := r.FullText()
		if !strings.HasPrefix(text, "Identity Service") && !strings.HasPrefix(text, "Controller Service [Controller Server]") {
			return // not selected: the Node, snapshot and other services are not the csi-controller's
		}
		switch r.State {
		case types.SpecStateSkipped:
			if !allowedSkip.MatchString(r.Failure.Message) {
				unexpected = append(unexpected, text+": "+r.Failure.Message)
			}
			skipped = append(skipped, text+": "+r.Failure.Message)
		case types.SpecStatePassed:
			passed = append(passed, r.FullText())
		}
	})
	suite, reporter := ginkgo.GinkgoConfiguration()
	suite.FocusStrings = []string{`sanity Identity Service`, `sanity Controller Service \[Controller Server\]`}
	suite.Timeout = 3 * time.Minute
	reporter.Succinct = true
	gomega.RegisterFailHandler(ginkgo.Fail)
	ok := ginkgo.RunSpecs(t, "csi-controller sanity", suite, reporter)
	sc.Finalize()
	if !ok {
		t.Fatal("csi-sanity failed")
	}

	t.Logf("%d sanity specs passed, %d skipped themselves:\n  %s", len(passed), len(skipped), strings.Join(skipped, "\n  "))
	for _, s := range unexpected {
		t.Errorf("a spec that must run was skipped: %s", s)
	}
	for _, want := range []string{"already existing name and same capacity", "already existing name and different capacity", "maximum-length name"} {
		found := false
		for _, p := range passed {
			found = found || strings.Contains(p, want)
		}
		if !found {
			t.Errorf("no passed spec mentions %q", want)
		}
	}
}
