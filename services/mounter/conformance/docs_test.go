package conformance

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/shared/testenv"
)

var update = flag.Bool("update", false, "rewrite the conformance table of docs/s3csi-mounter.md from the suite")

// TestTheDocsTableIsTheSuite keeps docs/s3csi-mounter.md listing exactly the suite: one row per
// behavior, in the suite's order, with its test name, words and verdict.
func TestTheDocsTableIsTheSuite(t *testing.T) {
	checkSuite(t)
	testenv.DocSection(t, "docs/s3csi-mounter.md", "conformance", docsTable(), *update,
		"cd services/mounter && GOWORK=off go test ./conformance -run TestTheDocsTableIsTheSuite -update")
}

// docsTable renders the suite as the markdown table of the docs.
func docsTable() string {
	var b strings.Builder
	b.WriteString("\n| test (`TestConformance/...`) | behavior | vs mount-s3 |\n|---|---|---|\n")
	for _, c := range suite {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", testName(c.name), cell(c.does), cell(c.verdict))
	}
	return b.String()
}

// testName is the name go test gives the subtest.
func testName(name string) string { return strings.ReplaceAll(name, " ", "_") }

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// checkSuite fails on rows the table cannot show: duplicate names, names go test rewrites
// beyond spaces, verdicts that are not same, stricter: or different:.
func checkSuite(t *testing.T) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range suite {
		if seen[c.name] {
			t.Errorf("two behaviors are named %q", c.name)
		}
		seen[c.name] = true
		if strings.ContainsFunc(c.name, func(r rune) bool { return r < ' ' || r > '~' || r == '/' || r == '|' }) {
			t.Errorf("behavior %q: a name is printable ASCII without / or |", c.name)
		}
		if c.verdict != same && !strings.HasPrefix(c.verdict, "stricter: ") && !strings.HasPrefix(c.verdict, "different: ") {
			t.Errorf("behavior %q: verdict %q is not same, stricter: why or different: why", c.name, c.verdict)
		}
		if c.does == "" || c.run == nil {
			t.Errorf("behavior %q has no description or no test", c.name)
		}
	}
}
