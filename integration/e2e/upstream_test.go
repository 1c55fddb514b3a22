//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestKubernetesExternalStorageSuite runs Kubernetes' own storage tests (an e2e.test binary of
// k8s.io/kubernetes v1.34.4 with only the External Storage tests linked in, built by
// hack/kube-bins.sh) against the installed chart: its External Storage tests for the driver
// upstream/testdriver.yaml defines, with the Dynamic PV patterns. The tests upstream/skip.txt
// names are skipped, each for the reason written beside it; any other test that fails fails this
// one, with the suite's own message.
func TestKubernetesExternalStorageSuite(t *testing.T) {
	bin, runner := filepath.Join(cfg.KubeBinDir, "e2e.test"), filepath.Join(cfg.KubeBinDir, "ginkgo")
	for _, f := range []string{bin, runner} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("Kubernetes' e2e suite is not built (make e2e-upstream-bins builds it): %v", err)
		}
	}
	skips, err := readSkips("upstream/skip.txt")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs("upstream")
	if err != nil {
		t.Fatal(err)
	}
	reportDir := filepath.Join(cfg.RepoRoot, "bin", "e2e-upstream")
	if err := os.RemoveAll(reportDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(reportDir, "e2e.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logFile.Close() }()

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	// Ginkgo's runner spreads the tests over upstreamProcs processes, each with its own namespaces;
	// the suite's [Serial] tests run alone at the end.
	cmd := exec.CommandContext(ctx, runner,
		fmt.Sprintf("--procs=%d", upstreamProcs),
		"--focus="+upstreamFocus,
		"--skip="+skips.regexp(),
		"--timeout=35m",
		"--no-color",
		"-v",
		bin, "--",
		"-kubeconfig="+cfg.Kubeconfig(),
		"-kubectl-path="+filepath.Join(cfg.KubeBinDir, "kubectl"),
		"-kubelet-root-dir="+cfg.KubeletDir,
		"-provider=local",
		"-repo-root="+dir,
		"-storage.testdriver="+filepath.Join(dir, "testdriver.yaml"),
		"-report-dir="+reportDir,
		"-report-complete-ginkgo",
		"-e2e-output-dir="+reportDir,
	)
	cmd.Dir = reportDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.WaitDelay = 10 * time.Second
	mpLogs := filepath.Join(reportDir, "mountpoint-pods")
	stopKeeping := keepMountpointLogs(mpLogs)
	start := time.Now()
	t.Logf("running Kubernetes' External Storage tests (log: %s; the Mountpoint Pods' logs: %s)", logFile.Name(), mpLogs)
	runErr := cmd.Run()
	stopKeeping()
	t.Logf("the suite ran %s", time.Since(start).Round(time.Second))

	rep, err := readGinkgoReport(filepath.Join(reportDir, "ginkgo", "report.json"))
	if err != nil {
		t.Fatalf("the suite left no report (%v; exit: %v); the last lines of %s:\n%s", err, runErr, logFile.Name(), tailOf(logFile.Name(), 40))
	}
	s := rep.summarize(skips)
	t.Logf("passed %d, failed %d, skipped by the suite (unsupported capability or pattern) %d, skipped by skip.txt %d, not in focus %d",
		len(s.passed), len(s.failed), len(s.skippedAtRun), len(s.skippedByList), s.outOfFocus)
	for _, name := range s.passed {
		t.Logf("passed: %s", name)
	}
	for _, f := range s.failed {
		t.Errorf("failed: %s\n%s", f.name, f.message)
	}
	if len(s.failed) > 0 {
		t.Logf("the Mountpoint Pods' errors during the suite:\n%s", mountpointErrors(mpLogs))
	}
	if len(s.passed) == 0 {
		t.Errorf("no test of the suite passed: the focus %q matched nothing that ran", upstreamFocus)
	}
	for _, sk := range skips {
		if !s.matched[sk.pattern] {
			t.Errorf("skip.txt entry %q matches no test of the focus: remove it", sk.pattern)
		}
	}
	if runErr != nil && len(s.failed) == 0 {
		t.Errorf("e2e.test: %v, with no failed test in its report; the last lines of %s:\n%s", runErr, logFile.Name(), tailOf(logFile.Name(), 40))
	}
}

// upstreamProcs is how many test processes run at once: the tests mostly wait for kubelet, so
// three keep the two cores of the test machine busy without starving the cluster.
const upstreamProcs = 3

// upstreamFocus selects the External Storage tests of s3csi with the dynamic provisioning
// patterns: a StorageClass of the driver, a claim, and the pods of the test.
const upstreamFocus = `External.Storage \[Driver: s3\.csi\.scality\.com\].*\[Testpattern: Dynamic PV`

// skip is one line of skip.txt: a regular expression over a test's full name and why.
type skip struct{ pattern, reason string }

type skipList []skip

// readSkips reads "REGEXP  # reason" lines; blank lines and lines starting with # are comments.
// A line without a reason is an error: every skip says why.
func readSkips(file string) (skipList, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read skip list: %w", err)
	}
	defer func() { _ = f.Close() }()
	var list skipList
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pattern, reason, ok := strings.Cut(line, " # ")
		pattern, reason = strings.TrimSpace(pattern), strings.TrimSpace(reason)
		if !ok || reason == "" {
			return nil, fmt.Errorf("%s:%d: %q gives no reason after \" # \"", file, n, line)
		}
		if _, err := regexp.Compile(pattern); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, n, err)
		}
		list = append(list, skip{pattern: pattern, reason: reason})
	}
	return list, sc.Err()
}

func (l skipList) regexp() string {
	parts := make([]string, 0, len(l))
	for _, s := range l {
		parts = append(parts, "(?:"+s.pattern+")")
	}
	return strings.Join(parts, "|")
}

// ginkgoReport is the part of Ginkgo's JSON report (github.com/onsi/ginkgo/v2/types.Report) this
// test reads.
type ginkgoReport struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeType            string
		LeafNodeText            string
		State                   string
		// CapturedGinkgoWriterOutput is the spec's timeline: its steps and the framework's log.
		CapturedGinkgoWriterOutput string
		Failure                    struct {
			Message  string
			Location struct {
				FileName   string
				LineNumber int
			}
		}
	}
}

func readGinkgoReport(file string) (*ginkgoReport, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the suite's report: %w", err)
	}
	var reports []ginkgoReport
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("decode the suite's report %s: %w", file, err)
	}
	if len(reports) != 1 {
		return nil, fmt.Errorf("the suite's report %s holds %d reports, want 1", file, len(reports))
	}
	return &reports[0], nil
}

type failedSpec struct{ name, message string }

type summary struct {
	passed, skippedAtRun, skippedByList []string
	failed                              []failedSpec
	outOfFocus                          int
	// matched records the skip.txt patterns that matched a test of the focus.
	matched map[string]bool
}

// failureTimelineLines is how much of a failed spec's timeline the test prints: enough for the
// steps before the failure and the namespace's events the framework dumps after it.
const failureTimelineLines = 60

// summarize sorts the tests of the focus by outcome; skips tells a test skip.txt excluded from one
// the suite skipped itself.
func (r *ginkgoReport) summarize(skips skipList) summary {
	focus := regexp.MustCompile(upstreamFocus)
	s := summary{matched: map[string]bool{}}
	for _, sp := range r.SpecReports {
		name := strings.TrimSpace(strings.Join(append(append([]string{}, sp.ContainerHierarchyTexts...), sp.LeafNodeText), " "))
		switch sp.State {
		case "passed":
			if sp.LeafNodeType == "It" {
				s.passed = append(s.passed, name)
			}
			continue
		case "skipped", "pending":
		default: // failed, panicked, interrupted, aborted, timedout: a suite node's too.
			s.failed = append(s.failed, failedSpec{name: sp.LeafNodeType + " " + name, message: fmt.Sprintf("%s (%s:%d)\nthe end of its timeline:\n%s",
				sp.Failure.Message, sp.Failure.Location.FileName, sp.Failure.Location.LineNumber,
				lastLines(sp.CapturedGinkgoWriterOutput, failureTimelineLines))})
			continue
		}
		if sp.LeafNodeType != "It" {
			continue
		}
		if !focus.MatchString(name) {
			s.outOfFocus++
			continue
		}
		listed := false
		for _, sk := range skips {
			if regexp.MustCompile(sk.pattern).MatchString(name) {
				s.matched[sk.pattern], listed = true, true
			}
		}
		if listed {
			s.skippedByList = append(s.skippedByList, name)
		} else {
			s.skippedAtRun = append(s.skippedAtRun, name)
		}
	}
	return s
}

// tailOf is the last n lines of a file, for a failure message.
func tailOf(file string, n int) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	return lastLines(string(data), n)
}

// keepMountpointLogs copies the Mountpoint Pods' container logs into dir every second until the
// returned function is called.
//
// Problem: a test of the suite that fails deletes its namespace, so the Mountpoint Pods of its
// volumes are deleted and kubelet removes their logs: the mounter's account of the failure was
// gone by the time anyone read the report.
// Solution: copy kubelet's log files of the Mountpoint Pods' namespace while the suite runs; each
// copy overwrites the last, so dir holds every Mountpoint Pod's log up to its last second.
func keepMountpointLogs(dir string) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	copyAll := func() {
		files, _ := filepath.Glob(filepath.Join("/var/log/pods", mountpointNamespace+"_*", "*", "*.log"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue // the pod was removed meanwhile
			}
			podDir := filepath.Base(filepath.Dir(filepath.Dir(f)))
			_ = os.MkdirAll(filepath.Join(dir, podDir), 0o755)
			_ = os.WriteFile(filepath.Join(dir, podDir, filepath.Base(f)), data, 0o644)
		}
	}
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			copyAll()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// mountpointErrors is the error-level lines of the Mountpoint Pods' logs kept in dir, each with
// its pod.
func mountpointErrors(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, `"level":"error"`) {
				fmt.Fprintf(&b, "%s: %s\n", filepath.Base(filepath.Dir(f)), line)
			}
		}
	}
	if b.Len() == 0 {
		return "(none)"
	}
	return b.String()
}
